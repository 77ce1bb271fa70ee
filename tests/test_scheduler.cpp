// zero::LRScheduler against DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR: hard-coded
// values, the formulas written out step by step, and a simulation of DeepSpeed's stateful
// scheduler driven the way its engine drives it (step() after each applied optimizer step).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "zero/config.h"
#include "zero/error.h"
#include "zero/scheduler.h"

namespace zero {
namespace {

constexpr double kPi = 3.141592653589793;

Config config_with(const std::string& scheduler, const std::string& optimizer_params = "{}") {
  return parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": )" +
                          optimizer_params + R"(}, "scheduler": )" + scheduler + "}",
                      1);
}

std::unique_ptr<LRScheduler> scheduler_for(const std::string& scheduler,
                                           const std::string& optimizer_params = "{}") {
  std::unique_ptr<LRScheduler> result = make_scheduler(config_with(scheduler, optimizer_params));
  EXPECT_NE(result, nullptr);
  return result;
}

// DeepSpeed's stateful scheduler, as deepspeed/runtime/lr_schedules.py (0.16.5) and
// engine._take_model_step use it: the constructor writes get_lr() at last_batch_iteration -1
// into the optimizer, and step() advances last_batch_iteration and writes get_lr() after every
// optimizer step that was applied (not after an fp16 overflow).
class DeepSpeedSimulation {
 public:
  DeepSpeedSimulation(const SchedulerConfig& c, double org_lr) : c_(c), org_lr_(org_lr) {
    n_ = std::max<int64_t>(2, c.warmup_num_steps);
    inverse_log_ = 1.0 / std::log(static_cast<double>(n_));
    lr_ = get_lr();
  }
  double lr() const { return lr_; }  // what the optimizer's param group holds now
  void step() {
    ++last_batch_iteration_;
    lr_ = get_lr();
  }

 private:
  double warmup(int64_t i) const {
    return c_.warmup_type == WarmupType::kLog ? inverse_log_ * std::log(static_cast<double>(i + 1))
                                              : static_cast<double>(i) / static_cast<double>(n_);
  }
  double get_lr() const {
    const int64_t i = last_batch_iteration_;
    if (c_.type == SchedulerType::kWarmupCosineLR) {
      if (i < 0) return 0.0;
      double ratio;
      if (i < n_) {
        ratio = c_.warmup_min_ratio + warmup(i) * (1.0 - c_.warmup_min_ratio);
      } else {
        const int64_t real_last_step = i - n_ + 1;
        const int64_t real_total_steps = c_.total_num_steps - n_;
        ratio = (1 + std::cos(kPi * static_cast<double>(real_last_step) /
                              static_cast<double>(real_total_steps))) / 2;
        ratio = std::max(0.0, c_.cos_min_ratio + (1.0 - c_.cos_min_ratio) * ratio);
      }
      return org_lr_ * ratio;
    }
    if (i < 0) return c_.warmup_min_lr;
    double gamma = 1.0;
    if (i < n_) {
      gamma = warmup(i);
    } else if (c_.type == SchedulerType::kWarmupDecayLR) {
      gamma = std::max(0.0, static_cast<double>(c_.total_num_steps - i) /
                                std::max(1.0, static_cast<double>(c_.total_num_steps - n_)));
    }
    return c_.warmup_min_lr + (c_.warmup_max_lr - c_.warmup_min_lr) * gamma;
  }

  SchedulerConfig c_;
  double org_lr_;
  int64_t n_;
  double inverse_log_;
  int64_t last_batch_iteration_ = -1;
  double lr_;
};

// Drives both like an engine with random fp16 overflows and checks every LR used, up to
// `limit` attempted steps.
void expect_matches_deepspeed(const std::string& scheduler, const std::string& params,
                              int64_t limit) {
  SCOPED_TRACE(scheduler);
  const Config config = config_with(scheduler, params);
  ASSERT_TRUE(config.scheduler.has_value());
  const std::unique_ptr<LRScheduler> ours = make_scheduler(config);
  DeepSpeedSimulation deepspeed(*config.scheduler, config.optimizer.lr);
  std::mt19937 random(7);
  int64_t applied = 0;
  for (int64_t attempt = 0; attempt < limit; ++attempt) {
    const double lr = ours->lr_at(applied);
    ASSERT_EQ(lr, deepspeed.lr()) << "attempt " << attempt << ", applied " << applied;
    const bool overflow = random() % 7 == 0;
    if (!overflow) {
      ++applied;
      deepspeed.step();
    }
  }
}

TEST(Scheduler, NoSchedulerMeansNull) {
  EXPECT_EQ(make_scheduler(config_with("null")), nullptr);
  EXPECT_EQ(make_scheduler(config_with("{}")), nullptr);
  EXPECT_EQ(make_scheduler(parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "SGD",
      "params": {"lr": 0.1}}})", 1)), nullptr);
}

// Values computed independently (a Python transcription of DeepSpeed's classes), to 17 digits.
TEST(Scheduler, WarmupLRDefaultsGolden) {
  const auto s = scheduler_for(R"({"type": "WarmupLR"})");
  EXPECT_EQ(s->lr_at(0), 0.0);  // constructor: warmup_min_lr
  EXPECT_EQ(s->lr_at(1), 0.0);  // gamma(0) = ln(1) / ln(1000) = 0
  EXPECT_DOUBLE_EQ(s->lr_at(2), 0.00010034333188799373);  // 0.001 * ln 2 / ln 1000
  EXPECT_DOUBLE_EQ(s->lr_at(3), 0.0001590404182398875);
  EXPECT_DOUBLE_EQ(s->lr_at(10), 0.0003333333333333334);  // ln 10 / ln 1000 = 1/3
  EXPECT_DOUBLE_EQ(s->lr_at(500), 0.0008996566681120063);
  EXPECT_DOUBLE_EQ(s->lr_at(999), 0.0009998551627419942);
  EXPECT_DOUBLE_EQ(s->lr_at(1000), 0.001);  // gamma(999) = ln 1000 / ln 1000 = 1
  EXPECT_EQ(s->lr_at(1001), 0.001);         // after warmup: warmup_max_lr exactly
  EXPECT_EQ(s->lr_at(5000), 0.001);
  EXPECT_EQ(s->lr_at(int64_t{1} << 40), 0.001);
}

TEST(Scheduler, WarmupLRLinearByHand) {
  const auto s = scheduler_for(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.01,
      "warmup_max_lr": 0.1, "warmup_num_steps": 10, "warmup_type": "linear"}})");
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.01);
  for (int64_t k = 1; k <= 10; ++k) {
    SCOPED_TRACE(k);
    // Step k runs with DeepSpeed's get_lr() at last_batch_iteration k - 1.
    EXPECT_DOUBLE_EQ(s->lr_at(k), 0.01 + 0.09 * static_cast<double>(k - 1) / 10.0);
  }
  EXPECT_DOUBLE_EQ(s->lr_at(10), 0.01 + 0.09 * 0.9);  // never reaches max inside warmup
  EXPECT_EQ(s->lr_at(11), 0.1);
  EXPECT_EQ(s->lr_at(100), 0.1);
  // lr_after_iteration is DeepSpeed's get_lr() itself.
  EXPECT_DOUBLE_EQ(s->lr_after_iteration(0), 0.01);
  EXPECT_DOUBLE_EQ(s->lr_after_iteration(5), 0.055);
  EXPECT_EQ(s->lr_after_iteration(10), 0.1);
}

TEST(Scheduler, WarmupNumStepsBelowTwoIsTwo) {
  // DeepSpeed: warmup_num_steps = max(2, warmup_num_steps).
  const auto s = scheduler_for(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.5,
      "warmup_max_lr": 1.5, "warmup_num_steps": 1}})");
  EXPECT_EQ(s->lr_at(0), 0.5);
  EXPECT_EQ(s->lr_at(1), 0.5);                // ln 1 / ln 2 = 0
  EXPECT_DOUBLE_EQ(s->lr_at(2), 1.5);         // ln 2 / ln 2 = 1
  EXPECT_EQ(s->lr_at(3), 1.5);
}

TEST(Scheduler, WarmupDecayLRGolden) {
  const auto s = scheduler_for(R"({"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-5,
      "warmup_max_lr": 3e-4, "warmup_num_steps": 100, "total_num_steps": 1000}})");
  EXPECT_EQ(s->lr_at(0), 1e-5);
  EXPECT_EQ(s->lr_at(1), 1e-5);
  EXPECT_DOUBLE_EQ(s->lr_at(2), 5.364934937127726e-05);
  EXPECT_DOUBLE_EQ(s->lr_at(50), 0.0002563506506287227);
  EXPECT_DOUBLE_EQ(s->lr_at(100), 0.0003);   // log warmup reaches max at iteration 99
  EXPECT_DOUBLE_EQ(s->lr_at(101), 0.0003);   // decay: (1000 - 100) / 900 = 1
  EXPECT_DOUBLE_EQ(s->lr_at(102), 0.00029967777777777777);
  EXPECT_DOUBLE_EQ(s->lr_at(500), 0.0001714333333333333);
  EXPECT_DOUBLE_EQ(s->lr_at(999), 1.0644444444444445e-05);
  EXPECT_DOUBLE_EQ(s->lr_at(1000), 1.0322222222222224e-05);
  EXPECT_EQ(s->lr_at(1001), 1e-5);  // gamma 0 at total_num_steps: back to warmup_min_lr
  EXPECT_EQ(s->lr_at(1200), 1e-5);
}

TEST(Scheduler, WarmupDecayLRLinearByHand) {
  const auto s = scheduler_for(R"({"type": "WarmupDecayLR", "params": {"warmup_max_lr": 1.0,
      "warmup_num_steps": 4, "total_num_steps": 10, "warmup_type": "linear"}})");
  const double expected[] = {0.0,       0.0,       0.25,      0.5,       0.75,      1.0,
                             5.0 / 6.0, 4.0 / 6.0, 3.0 / 6.0, 2.0 / 6.0, 1.0 / 6.0, 0.0, 0.0};
  for (int64_t k = 0; k < 13; ++k) {
    SCOPED_TRACE(k);
    EXPECT_DOUBLE_EQ(s->lr_at(k), expected[k]);
  }
}

TEST(Scheduler, WarmupCosineLRGolden) {
  // Defaults: log warmup over 1000 -> here 100 steps, cos_min_ratio 1e-4, warmup_min_ratio 0.
  const auto s = scheduler_for(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 2000,
      "warmup_num_steps": 100}})", R"({"lr": 6e-4})");
  EXPECT_EQ(s->base_lr(), 6e-4);
  EXPECT_EQ(s->lr_at(0), 0.0);  // DeepSpeed's constructor writes 0
  EXPECT_EQ(s->lr_at(1), 0.0);  // warmup_min_ratio 0
  EXPECT_DOUBLE_EQ(s->lr_at(2), 9.030899869919434e-05);
  EXPECT_DOUBLE_EQ(s->lr_at(50), 0.0005096910013008055);
  EXPECT_DOUBLE_EQ(s->lr_at(100), 0.0006);
  EXPECT_DOUBLE_EQ(s->lr_at(101), 0.0005999995899467371);  // cosine starts below 1
  EXPECT_DOUBLE_EQ(s->lr_at(102), 0.0005999983597880697);
  EXPECT_DOUBLE_EQ(s->lr_at(1000), 0.00032480132626133554);
  EXPECT_DOUBLE_EQ(s->lr_at(1999), 6.041005326284678e-08);
  EXPECT_DOUBLE_EQ(s->lr_at(2000), 6e-08);  // cos_min_ratio * lr at iteration total - 1
  // zero holds the end value; DeepSpeed 0.16.5 would rise again (6.041005326284678e-08).
  EXPECT_DOUBLE_EQ(s->lr_at(2001), 6e-08);
  EXPECT_DOUBLE_EQ(s->lr_at(100000), 6e-08);
}

TEST(Scheduler, WarmupCosineLRLinearByHand) {
  const double base = 0.1, r0 = 0.2, c = 0.1;
  const int64_t n = 4, t = 12;
  const auto s = scheduler_for(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 12,
      "warmup_num_steps": 4, "warmup_min_ratio": 0.2, "cos_min_ratio": 0.1,
      "warmup_type": "linear"}})", R"({"lr": 0.1})");
  EXPECT_EQ(s->lr_at(0), 0.0);                  // not warmup_min_ratio * lr: DeepSpeed writes 0
  EXPECT_DOUBLE_EQ(s->lr_at(1), base * r0);     // 0.02
  for (int64_t k = 1; k <= 20; ++k) {
    SCOPED_TRACE(k);
    const int64_t i = k - 1;  // DeepSpeed's last_batch_iteration
    double ratio;
    if (i < n) {
      ratio = r0 + (1.0 - r0) * static_cast<double>(i) / static_cast<double>(n);
    } else {
      const double p = std::min(1.0, static_cast<double>(i - n + 1) / static_cast<double>(t - n));
      ratio = c + (1.0 - c) * (1.0 + std::cos(kPi * p)) / 2.0;
    }
    EXPECT_NEAR(s->lr_at(k), base * ratio, 1e-15);
  }
  EXPECT_DOUBLE_EQ(s->lr_at(8), 0.055);  // half way down the cosine: 0.1 * (0.1 + 0.9 / 2)
  EXPECT_DOUBLE_EQ(s->lr_at(12), 0.01);  // cos_min_ratio * lr
  EXPECT_DOUBLE_EQ(s->lr_at(13), 0.01);
}

TEST(Scheduler, MatchesDeepSpeedSequenceWithSkippedSteps) {
  expect_matches_deepspeed(R"({"type": "WarmupLR"})", "{}", 3000);
  expect_matches_deepspeed(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 1e-6,
      "warmup_max_lr": 2e-3, "warmup_num_steps": 37, "warmup_type": "linear"}})", "{}", 200);
  expect_matches_deepspeed(R"({"type": "WarmupDecayLR", "params": {"total_num_steps": 500,
      "warmup_num_steps": 50}})", "{}", 800);
  expect_matches_deepspeed(R"({"type": "WarmupDecayLR", "params": {"total_num_steps": 2,
      "warmup_num_steps": 1, "warmup_max_lr": 0.5, "warmup_type": "linear"}})", "{}", 20);
  expect_matches_deepspeed(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 700,
      "warmup_num_steps": 60, "warmup_min_ratio": 0.05}})", R"({"lr": 3e-4})", 700);
  expect_matches_deepspeed(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 30,
      "warmup_num_steps": 10, "warmup_type": "linear", "cos_min_ratio": 0}})", R"({"lr": 1.0})",
                           30);
}

TEST(Scheduler, CosineUsesOptimizerLrAndOthersDoNot) {
  const std::string cosine = R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 10,
      "warmup_num_steps": 2, "warmup_type": "linear"}})";
  // lr_at(2): linear warmup at iteration 1 of 2, ratio 1/2.
  EXPECT_DOUBLE_EQ(scheduler_for(cosine, R"({"lr": 0.5})")->lr_at(2), 0.25);
  EXPECT_DOUBLE_EQ(scheduler_for(cosine, R"({"lr": 2.0})")->lr_at(2), 1.0);
  const std::string warmup = R"({"type": "WarmupLR", "params": {"warmup_num_steps": 2}})";
  EXPECT_DOUBLE_EQ(scheduler_for(warmup, R"({"lr": 0.5})")->lr_at(3), 0.001);
  EXPECT_DOUBLE_EQ(scheduler_for(warmup, R"({"lr": 2.0})")->lr_at(3), 0.001);
}

TEST(Scheduler, DirectConstructionAndErrors) {
  SchedulerConfig c;
  c.type = SchedulerType::kWarmupLR;
  c.warmup_num_steps = 3;
  c.warmup_type = WarmupType::kLinear;
  c.warmup_max_lr = 3.0;
  LRScheduler s(c, 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(3), 2.0);
  EXPECT_THROW(s.lr_at(-1), Error);
  EXPECT_THROW(s.lr_after_iteration(-1), Error);
  c.type = SchedulerType::kWarmupCosineLR;
  c.total_num_steps = 3;  // must exceed the warmup length
  EXPECT_THROW(LRScheduler(c, 1.0), Error);
  c.total_num_steps = 4;
  EXPECT_NO_THROW(LRScheduler(c, 1.0));
  EXPECT_THROW(LRScheduler(c, -1.0), Error);
  try {
    s.lr_at(-2);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("got -2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zero
