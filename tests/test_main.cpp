// GoogleTest main for single- and multi-rank tests. Under mpirun every rank runs every test;
// rank 0 prints the usual report and the other ranks print only their failures, prefixed with
// the rank, so a failure on any rank is visible and makes mpirun (and ctest) fail.
//
// Note [Skipped tests are counted]: GoogleTest reports a skipped test as passed, so a binary
// whose cases all skipped would read "Passed" in ctest without testing anything. Here:
//   - a process in which every test that ran was skipped exits 77, which zero_add_test
//     declares as ctest's SKIP_RETURN_CODE: ctest shows it as skipped, with the reason;
//   - otherwise, with ZERO_TEST_RECORD_DIR set (scripts/test.sh sets it), rank 0 appends one
//     line per test to DIR/<program>.np<ranks>.tsv: "ran" or "skipped", the test, the reason.
//     scripts/test.sh's skip report (tests/lib/skip_report.py) lists every skip from them and
//     from ctest, checks that a test skipped for its rank count (ZERO_SKIP_AT_THIS_RANK_COUNT)
//     ran at another, and in CI fails on any skip but the GPU tests'.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

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

// The reason GTEST_SKIP() gave, on one line.
std::string skip_reason(const ::testing::TestResult& result) {
  std::string reason;
  for (int i = 0; i < result.total_part_count(); ++i) {
    const auto& part = result.GetTestPartResult(i);
    if (part.skipped()) reason = part.message();
  }
  for (char& c : reason) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  while (!reason.empty() && reason.back() == ' ') reason.pop_back();
  return reason.empty() ? "(no reason given)" : reason;
}

struct Outcome {
  std::string test;
  bool skipped;
  std::string reason;
};

std::vector<Outcome> outcomes() {
  std::vector<Outcome> all;
  const auto& unit = *::testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const auto& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const auto& info = *suite.GetTestInfo(t);
      if (!info.should_run()) continue;
      const auto& result = *info.result();
      const std::string name = std::string(suite.name()) + "." + info.name();
      all.push_back({name, result.Skipped(), result.Skipped() ? skip_reason(result) : ""});
    }
  }
  return all;
}

std::string program_name(const char* argv0) {
  std::string path = argv0;
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void record(const std::vector<Outcome>& all, const std::string& program, int ranks) {
  const char* dir = std::getenv("ZERO_TEST_RECORD_DIR");
  if (!dir || !*dir) return;
  const std::string path =
      std::string(dir) + "/" + program + ".np" + std::to_string(ranks) + ".tsv";
  std::ofstream out(path, std::ios::app);
  for (const auto& o : all) {
    out << (o.skipped ? "skipped" : "ran") << '\t' << o.test << '\t' << o.reason << '\n';
  }
  if (!out) std::cerr << "test_main: could not append to " << path << std::endl;
}

}  // namespace
}  // namespace zero::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The launcher tells us our rank before MPI is initialized; tests that need MPI create the
  // communicator on first use. Test harness only: the library reads its environment in one
  // place (src/common/env.cpp).
  const char* rank_text = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size_text = std::getenv("OMPI_COMM_WORLD_SIZE");
  const int rank = rank_text ? std::atoi(rank_text) : 0;
  const int ranks = size_text ? std::atoi(size_text) : 1;
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new zero::test::FailurePrinter(rank));
  }
  const int status = RUN_ALL_TESTS();
  if (status != 0) return status;
  const auto all = zero::test::outcomes();
  size_t skipped = 0;
  for (const auto& o : all) skipped += o.skipped ? 1 : 0;
  if (all.empty() || skipped < all.size()) {
    if (rank == 0) zero::test::record(all, zero::test::program_name(argv[0]), ranks);
    return 0;
  }
  // Every test skipped (Note [Skipped tests are counted]): ctest's SKIP_RETURN_CODE.
  if (rank == 0) {
    std::cout << "SKIPPED: all " << all.size() << " test(s): " << all.front().reason
              << std::endl;
  }
  return 77;
}
