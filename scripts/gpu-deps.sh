#!/usr/bin/env bash
# Downloads, on a Debian 12 machine with apt (this project's development machine), the Debian
# packages scripts/gpu-check.sh needs on a GPU machine that has no apt or network: Open MPI
# (runtime, launcher, headers), nlohmann-json, CLI11, GoogleTest, liburing, PCRE2, zlib and pkgconf,
# with the shared libraries they load that such a machine may lack. They go to .gpu-deps/
# (ignored by git; carry it to the GPU machine), about 10 MB. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libhwloc15 libevent-core-2.1-7
          libevent-pthreads-2.1-7 libpmix2 nlohmann-json3-dev libcli11-dev libgtest-dev
          liburing2 liburing-dev libpcre2-dev libpcre2-8-0 zlib1g-dev pkgconf pkgconf-bin libpkgconf3)
mkdir -p .gpu-deps
cd .gpu-deps
missing=()
for p in "${packages[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get download "${missing[@]}" >/dev/null
fi
du -sh . | sed 's/^/gpu-deps: /'
