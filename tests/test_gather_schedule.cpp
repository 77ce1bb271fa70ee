// Stage 3's gather schedule without any communication (src/engine/gather_schedule.h, Note
// [Stage 3 trace and prefetch]): recording and replaying the trace, departing from it,
// prefetch within the bucket and the live budget, reuse distance, and which group the live
// budget releases first.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "engine/gather_schedule.h"

namespace zero::test {
namespace {

// Four groups of 100 elements (128 padded). Prefetch up to 300 elements ahead, 1000 live.
GatherLimits limits(int64_t bucket = 300, int64_t live = 1000, int64_t reuse = 1000000,
                    bool prefetch = true) {
  GatherLimits l;
  l.prefetch_bucket = bucket;
  l.max_live = live;
  l.max_reuse_distance = reuse;
  l.prefetch = prefetch;
  return l;
}

GatherSchedule schedule_of(const GatherLimits& l) {
  return GatherSchedule({100, 100, 100, 100}, {128, 128, 128, 128}, l);
}

// One micro-step of a 4-unit model: forward 0..3, backward 3..0.
const std::vector<int> kStep = {0, 1, 2, 3, 3, 2, 1, 0};

void run_step(GatherSchedule& s, const std::vector<int>& order) {
  for (size_t i = 0; i < order.size(); ++i) {
    s.fetched(order[i], i < order.size() / 2 ? FetchMode::kForward : FetchMode::kBackward);
  }
}

TEST(GatherSchedule, RecordsTheFirstStepAndReplaysIt) {
  GatherSchedule s = schedule_of(limits());
  EXPECT_FALSE(s.replaying());
  // Recording: nothing is prefetched before a trace exists.
  s.fetched(0, FetchMode::kForward);
  EXPECT_TRUE(s.prefetch([](int) { return true; }, 0, 0).empty());
  for (size_t i = 1; i < kStep.size(); ++i) s.fetched(kStep[i], FetchMode::kForward);
  EXPECT_TRUE(s.adopt()) << "the first trace is new";
  EXPECT_EQ(s.trace(), kStep);
  EXPECT_TRUE(s.replaying());
  // The same order again: no change, no invalidation.
  run_step(s, kStep);
  EXPECT_FALSE(s.adopt());
  EXPECT_EQ(s.invalidations(), 0);
}

TEST(GatherSchedule, PrefetchesTheNextGroupsWithinTheBucketAndTheLiveBudget) {
  GatherSchedule s = schedule_of(limits(/*bucket=*/300));
  run_step(s, kStep);
  s.adopt();
  s.fetched(0, FetchMode::kForward);
  const auto all_released = [](int) { return true; };
  // 300 elements ahead hold two groups of 128 padded (a third would make 384).
  EXPECT_EQ(s.prefetch(all_released, 0, 0), (std::vector<int>{1, 2}));
  // Already 128 ahead: one more fits.
  EXPECT_EQ(s.prefetch(all_released, 128, 0), (std::vector<int>{1}));
  // Gathered groups are skipped; a group used twice ahead is gathered once.
  EXPECT_EQ(s.prefetch([](int g) { return g != 1; }, 0, 0), (std::vector<int>{2, 3}));
  // The live budget stops it too: with 872 of 1000 live, one more group of 128 fits.
  EXPECT_EQ(s.prefetch(all_released, 0, 872 - 128), (std::vector<int>{1, 2}));
  EXPECT_EQ(s.prefetch(all_released, 0, 872), (std::vector<int>{1}));
  // Without prefetch (overlap_comm false or a 0 bucket) nothing is ever gathered ahead.
  GatherSchedule off = schedule_of(limits(300, 1000, 1000000, /*prefetch=*/false));
  run_step(off, kStep);
  off.adopt();
  off.fetched(0, FetchMode::kForward);
  EXPECT_TRUE(off.prefetch(all_released, 0, 0).empty());
}

TEST(GatherSchedule, ADepartureStopsPrefetchAndTheNewOrderIsAdopted) {
  GatherSchedule s = schedule_of(limits());
  run_step(s, kStep);
  s.adopt();
  s.fetched(0, FetchMode::kForward);
  const GatherSchedule::Fetch departed = s.fetched(2, FetchMode::kForward);  // expected 1
  EXPECT_TRUE(departed.invalidated);
  EXPECT_EQ(departed.position, 1u);
  EXPECT_EQ(departed.expected, 1);
  EXPECT_FALSE(s.replaying());
  EXPECT_TRUE(s.prefetch([](int) { return true; }, 0, 0).empty());
  for (int g : {1, 3, 3, 1, 2, 0}) s.fetched(g, FetchMode::kBackward);
  EXPECT_TRUE(s.adopt());
  EXPECT_EQ(s.trace(), (std::vector<int>{0, 2, 1, 3, 3, 1, 2, 0}));
  EXPECT_EQ(s.invalidations(), 1);
  // A step cut short (fewer fetches than the trace) is a departure too.
  s.fetched(0, FetchMode::kForward);
  EXPECT_TRUE(s.adopt());
  EXPECT_EQ(s.trace(), (std::vector<int>{0}));
}

TEST(GatherSchedule, RecomputeFetchesAreRecordedInTheTrace) {
  GatherSchedule s = schedule_of(limits());
  const std::vector<int> with_recompute = {0, 1, 1, 1, 0, 0};
  for (size_t i = 0; i < with_recompute.size(); ++i) {
    s.fetched(with_recompute[i], i == 2 || i == 4 ? FetchMode::kRecompute : FetchMode::kForward);
  }
  s.adopt();
  EXPECT_EQ(s.trace(), with_recompute);
}

TEST(GatherSchedule, ReuseDistanceKeepsGroupsUsedAgainSoon) {
  GatherSchedule s = schedule_of(limits(300, 1000, /*reuse=*/250));
  run_step(s, kStep);
  s.adopt();
  for (int g : {0, 1, 2, 3}) s.fetched(g, FetchMode::kForward);
  EXPECT_TRUE(s.reused_soon(3));   // next: right away
  EXPECT_TRUE(s.reused_soon(2));   // after 3 (100 elements)
  EXPECT_TRUE(s.reused_soon(1));   // after 3, 2 (200)
  EXPECT_FALSE(s.reused_soon(0));  // after 3, 2, 1 (300 > 250)
  GatherSchedule never = schedule_of(limits(300, 1000, /*reuse=*/0));
  run_step(never, kStep);
  never.adopt();
  never.fetched(0, FetchMode::kForward);
  EXPECT_FALSE(never.reused_soon(0));
  GatherSchedule recording = schedule_of(limits());
  recording.fetched(0, FetchMode::kForward);
  EXPECT_FALSE(recording.reused_soon(0)) << "no trace yet";
}

TEST(GatherSchedule, TheLiveBudgetReleasesTheFarthestNextUseFirst) {
  GatherSchedule s = schedule_of(limits());
  run_step(s, kStep);
  s.adopt();
  for (int g : {0, 1, 2}) s.fetched(g, FetchMode::kForward);
  // Next uses from position 3: 3 at 3, 2 at 5, 1 at 6, 0 at 7.
  EXPECT_EQ(s.eviction_victim({0, 1, 2}), 0);
  EXPECT_EQ(s.eviction_victim({1, 2}), 1);
  EXPECT_EQ(s.eviction_victim({}), -1);
  // Without a trace: the first candidate.
  GatherSchedule recording = schedule_of(limits());
  EXPECT_EQ(recording.eviction_victim({2, 1}), 2);
}

TEST(GatherSchedule, AbandonForgetsTheStepAndReplaysNothingUntilTheNextAdopt) {
  GatherSchedule s = schedule_of(limits());
  run_step(s, kStep);
  s.adopt();
  s.fetched(0, FetchMode::kForward);
  s.abandon();
  EXPECT_FALSE(s.replaying());
  EXPECT_TRUE(s.prefetch([](int) { return true; }, 0, 0).empty());
  run_step(s, kStep);
  EXPECT_TRUE(s.adopt());  // recorded afresh
  EXPECT_EQ(s.trace(), kStep);
}

}  // namespace
}  // namespace zero::test
