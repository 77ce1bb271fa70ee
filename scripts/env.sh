# Runtime environment for zero's scripts (sourced). See docs/benchmarks.md for why:
# - OPENBLAS_CORETYPE=Haswell, set on this machine, halves OpenBLAS fp32 GEMM speed.
# - Two thread pools spinning on the same cores halve speed: make OpenMP wait passively.
unset OPENBLAS_CORETYPE
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
