// Helper of check_zero_ckpt.sh: trains the tests' tiny GPT-2 (vocab 97, 2 layers, 32 wide) for
// two steps on every rank and saves a checkpoint, so zero-ckpt has a real one to read.
//
//   make_test_checkpoint CHECKPOINT_DIR REFERENCE_FILE STAGE fp32|bf16
//
// Collective (run it under zero-run/mpirun). Rank 0 also writes REFERENCE_FILE: the engine's
// whole parameters (zero::full_state_dict, parameter dtype) as safetensors, what an export of
// the checkpoint in that dtype must equal bit for bit.
#include <cstdio>
#include <exception>
#include <string>

#include "engine_harness.h"
#include "zero/comm_mpi.h"
#include "zero/safetensors.h"
#include "zero/state_dict.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: make_test_checkpoint CHECKPOINT_DIR REFERENCE_FILE STAGE fp32|bf16\n");
    return 2;
  }
  try {
    auto comm = zero::make_mpi_communicator();
    zero::test::RunOptions options;
    options.stage = std::stoi(argv[3]);
    options.dtype = argv[4];
    options.steps = 2;
    if (options.stage == 3) options.extra_zero_json = "\"stage3_param_persistence_threshold\": 0";
    zero::test::RunResult run = zero::test::run_engine(zero::test::tiny_gpt2_spec(), options, comm);
    const auto full = zero::full_state_dict(*run.engine);
    run.engine->save_checkpoint(argv[1], "", "{\"data_step\": 2}");
    if (comm->rank() == 0) zero::write_safetensors(argv[2], full, {{"format", "pt"}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_test_checkpoint: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
