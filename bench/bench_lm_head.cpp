// GPT-2's LM head and loss, one core: logits then cross_entropy (what the Python peers run)
// against the fused head (Note [Fused LM-head cross-entropy], src/models/lm_head_loss.cpp) at
// several rows per block; forward + backward, median of 7 interleaved rounds, at gpt2-tiny's
// and gpt2-mini's widths
// (with 512 rows: the benchmarks' tokens per rank).
//
//   bench_lm_head [--rows 512] [--widths 128,384]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "models/lm_head_loss.h"

int main(int argc, char** argv) {
  int64_t rows = 512;
  std::vector<int64_t> widths = {128, 384};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    if (key == "--rows") {
      rows = std::stoll(argv[i + 1]);
    } else if (key == "--widths") {
      widths.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string item; std::getline(list, item, ',');) widths.push_back(std::stoll(item));
    }
  }
  at::set_num_threads(1);
  const int64_t vocab = 50257;
  constexpr int kRounds = 7;
  std::printf("| width | variant | median ms | min-max ms | GFLOP/s (median) |\n|---|---|---|---|---|\n");
  for (const int64_t width : widths) {
    const at::Tensor h = at::randn({rows, width}).requires_grad_(true);
    const at::Tensor w = (at::randn({vocab, width}) * 0.02).requires_grad_(true);
    const at::Tensor t = at::randint(0, vocab, {rows}, at::kLong);
    struct Variant {
      std::string name;
      std::function<at::Tensor()> loss;
      std::vector<double> ms;
    };
    std::vector<Variant> variants;
    variants.push_back({"logits, then cross_entropy",
                        [&] { return at::cross_entropy_loss(at::mm(h, w.t()), t); }, {}});
    for (const int64_t block : {int64_t{0}, int64_t{128}, int64_t{256}, int64_t{333}, rows}) {
      variants.push_back({block == 0 ? "fused, default block" : "fused, " + std::to_string(block) + " rows",
                          [&, block] { return zero::gpt2::lm_head_cross_entropy(h, w, t, block); },
                          {}});
    }
    // Round-robin, so drift in the shared machine's speed hits every variant alike; the
    // first round is a warm-up.
    for (int round = 0; round <= kRounds; ++round) {
      for (auto& v : variants) {
        h.mutable_grad() = at::Tensor();
        w.mutable_grad() = at::Tensor();
        const auto start = std::chrono::steady_clock::now();
        v.loss().backward();
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        if (round > 0) v.ms.push_back(ms);
      }
    }
    for (auto& v : variants) {
      std::sort(v.ms.begin(), v.ms.end());
      const double median = v.ms[v.ms.size() / 2];
      std::printf("| %lld | %s | %.1f | %.1f-%.1f | %.1f |\n", static_cast<long long>(width),
                  v.name.c_str(), median, v.ms.front(), v.ms.back(),
                  6.0 * rows * width * vocab / median / 1e6);
    }
  }
  return 0;
}
