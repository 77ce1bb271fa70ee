// zero-train's run: the phases of Note [zero-train's phases] (trainer.h), in order.
#include <cstdio>

#include "trainer.h"
#include "zero/comm_mpi.h"
#include "zero/error.h"

namespace zero::train {
namespace {

// "zero-train: error[ on rank R]: MESSAGE" on rank `origin` only, where every rank knows the
// failure and its origin: one message for the job.
void print_error_once(Communicator& comm, int origin, const std::string& message) {
  if (comm.rank() != origin) return;
  std::fprintf(stderr, "zero-train: error%s: %s\n",
               comm.size() > 1 && origin != 0 ? (" on rank " + std::to_string(origin)).c_str() : "",
               message.c_str());
  std::fflush(stderr);
}

// A resumed run whose checkpoint is at --steps: nothing to train, exit 0.
int nothing_left(const Options& o, const Resumed& r, Communicator& comm) {
  if (comm.rank() == 0) {
    if (!r.from.note.empty()) std::printf("zero-train: %s\n", r.from.note.c_str());
    std::printf("zero-train: the checkpoint in %s is at step %lld of --steps %lld: nothing "
                "left to train\n", r.from.dir.c_str(), static_cast<long long>(r.first_step),
                static_cast<long long>(o.steps));
    std::fflush(stdout);
  }
  comm.barrier()->wait();
  return 0;
}

}  // namespace

int run(Options o, const std::shared_ptr<Communicator>& comm) {
  try {
    Inputs in = prepare_inputs(o, *comm);
    const Planned planned = plan_run(o, in, *comm);
    if (o.plan) {
      if (comm->rank() == 0) print_plans(o, in, planned, comm->size());
      return 0;
    }
    const std::unique_ptr<RunDirectory> directory = claim_run_directory(o, *comm);
    Trainee trainee = build_engine(o, in, planned, directory->from, comm);
    Resumed resumed = resume(o, in, trainee, directory->from, *comm);
    if (resumed.first_step == o.steps) return nothing_left(o, resumed, *comm);
    const Trained trained = train(o, in, planned, trainee, resumed, *comm);
    summarise(o, in, planned, trainee, resumed, trained, *comm);
    comm->barrier()->wait();
    return 0;
  } catch (const CollectiveError& e) {
    // Every rank threw it together (a bad input, a save or load that failed somewhere): the
    // job ends normally, with one message and exit status 2.
    print_error_once(*comm, e.origin_rank(), e.what());
    return 2;
  } catch (const std::exception& e) {
    // One rank alone: the others may wait in a collective, so the whole job ends (status 1).
    std::fprintf(stderr, "zero-train: error on rank %d: %s\n", comm->rank(), e.what());
    std::fflush(stderr);
    abort_mpi_job(1);
  }
  return 1;  // not reached: abort_mpi_job ends the job (this silences -Wreturn-type)
}

}  // namespace zero::train
