// GoogleTest main for single- and multi-rank tests. Under mpirun every rank runs every test;
// rank 0 prints the usual report and the other ranks print only their failures, prefixed with
// the rank, so a failure on any rank is visible and makes mpirun (and ctest) fail.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "test_util.h"

namespace zero::test {
namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::cerr << "[rank " << rank_ << "] " << (result.file_name() ? result.file_name() : "?")
              << ":" << result.line_number() << ": " << result.summary() << std::endl;
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace zero::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The launcher tells us our rank before MPI is initialized; tests that need MPI create the
  // communicator on first use. Test harness only: the library reads its environment in one
  // place (src/common/env.cpp).
  const char* rank_text = std::getenv("OMPI_COMM_WORLD_RANK");
  const int rank = rank_text ? std::atoi(rank_text) : 0;
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new zero::test::FailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}
