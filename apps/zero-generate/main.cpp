// zero-generate: text from a causal LM (GPT-2, the Llama family), streamed as it is produced.
//
//   zero-generate --model DIR --prompt TEXT [--max-tokens 100] [--temperature 0.8] [--top-k 40]
//                 [--top-p 1.0] [--seed 0] [--device cpu|cuda] [--no-kv-cache] [--threads T]
//                 [--encoder data/gpt2/encoder.json] [--vocab data/gpt2/vocab.bpe] [--tokenizer PATH]
//
// DIR: a Hugging Face directory (config.json + model.safetensors: what save_pretrained
// and `zero-ckpt export` write, what zero-train --init reads), or a zero checkpoint (a
// checkpoint directory with `latest`, one checkpoint, or a run directory with checkpoints/;
// its model from the client state zero-train records). The prompt is encoded with the model
// directory's tokenizer.json (zero::HfTokenizer; or --tokenizer), else GPT-2's BPE
// (zero::GPT2Encoder), and continued token by token: temperature (0: the most likely token),
// then the top k, then the smallest set whose probability reaches top p, drawn with a generator
// seeded by --seed. With the KV cache (the default) each new token costs one position; with
// --no-kv-cache the whole context is run again for each token (for comparison). The
// continuation goes to standard output as it is produced; the rate to standard error. A bad
// input is one message and exit status 2.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "zero/checkpoint.h"
#include "zero/cuda_support.h"
#include "zero/error.h"
#include "zero/causal_lm.h"
#include "zero/hf_tokenizer.h"
#include "zero/tokenizer.h"

namespace {

namespace fs = std::filesystem;

struct Options {
  std::string model;
  std::string prompt;
  int64_t max_tokens = 100;
  double temperature = 0.8;
  int64_t top_k = 40;
  double top_p = 1.0;
  uint64_t seed = 0;
  std::string device = "cpu";
  bool kv_cache = true;
  // --check-kv-cache: both paths at every position (the cached one's choice taken), their
  // logits compared within `tolerance` of the logits' largest magnitude.
  bool check_kv_cache = false;
  double tolerance = 1e-3;
  int threads = 0;
  std::string encoder = "data/gpt2/encoder.json";
  std::string vocab = "data/gpt2/vocab.bpe";
  std::string tokenizer;  // "": the model directory's tokenizer.json, else GPT-2's files
};

// How text becomes the model's ids and back: a Hugging Face tokenizer.json, or GPT-2's BPE.
struct TextCodec {
  std::function<std::vector<int32_t>(const std::string&)> encode;
  std::function<std::string(int64_t)> token_bytes;
  int64_t vocab_size = 0;
  std::string what;  // for messages: the tokenizer's file
};

// --tokenizer, else a tokenizer.json in the model's directory (or the run directory above a
// checkpoint directory: zero-train copies --init's tokenizer there), else GPT-2's files.
TextCodec load_codec(const Options& o) {
  std::string path = o.tokenizer;
  if (path.empty()) {
    const fs::path model = fs::path(o.model).lexically_normal();
    for (const fs::path& dir : {model, model.parent_path(), model.parent_path().parent_path()}) {
      if (!dir.empty() && zero::HfTokenizer::present(dir.string())) {
        path = dir.string();
        break;
      }
    }
  }
  TextCodec codec;
  if (!path.empty()) {
    auto tokenizer = std::make_shared<zero::HfTokenizer>(zero::HfTokenizer::load(path));
    codec.encode = [tokenizer](const std::string& text) { return tokenizer->encode(text, "--prompt"); };
    codec.token_bytes = [tokenizer](int64_t id) { return tokenizer->decode({id}); };
    codec.vocab_size = tokenizer->vocab_size();
    codec.what = tokenizer->path();
    return codec;
  }
  auto encoder = std::make_shared<zero::GPT2Encoder>(zero::GPT2Encoder::load(o.encoder, o.vocab));
  codec.encode = [encoder](const std::string& text) { return encoder->encode(text, "--prompt"); };
  codec.token_bytes = [encoder](int64_t id) { return encoder->decoder().token_bytes(id); };
  codec.vocab_size = encoder->vocab_size();
  codec.what = o.encoder;
  return codec;
}

// A checkpoint directory and tag as zero-train's --resume finds them, or "" for a Hugging Face
// directory.
std::pair<std::string, std::string> checkpoint_of(const std::string& path) {
  // A run directory has a config.json too (the effective DeepSpeed config): the weights decide.
  if (fs::exists(fs::path(path) / "model.safetensors") ||
      fs::exists(fs::path(path) / "model.safetensors.index.json")) {
    return {"", ""};
  }
  if (fs::exists(fs::path(path) / "latest")) return {path, ""};
  if (fs::exists(fs::path(path) / "metadata.json")) {
    const fs::path p = fs::path(path).lexically_normal();
    const fs::path dir = p.filename().empty() ? p.parent_path() : p;
    return {dir.parent_path().empty() ? "." : dir.parent_path().string(), dir.filename().string()};
  }
  if (fs::exists(fs::path(path) / "checkpoints" / "latest")) {
    return {(fs::path(path) / "checkpoints").string(), ""};
  }
  ZERO_CHECK(false, "--model ", path, ": neither a Hugging Face directory (config.json + ",
             "model.safetensors) nor a zero checkpoint (latest, metadata.json or ",
             "checkpoints/latest)");
  return {"", ""};
}

std::shared_ptr<zero::CausalLM> load_model(const std::string& path) {
  const auto [dir, tag] = checkpoint_of(path);
  if (dir.empty()) {
    std::shared_ptr<zero::CausalLM> model = zero::causal_lm_config_from_dir(path)->build();
    zero::load_hf_weights(*model, path);
    return model;
  }
  const zero::CheckpointSummary summary = zero::inspect_checkpoint(dir, tag);
  const nlohmann::json client = nlohmann::json::parse(summary.client_state, nullptr, false);
  ZERO_CHECK(client.is_object() && client.contains("model_config"), "--model ", path,
             ": the checkpoint's client state records no model shape (\"model_config\"; ",
             "zero-train records one)");
  std::shared_ptr<zero::CausalLM> model = zero::causal_lm_config_from_hf_json(
      client.at("model_config").dump(), summary.path + " (model_config)")->build();
  std::map<std::string, at::Tensor> params;
  for (const auto& item : model->named_parameters()) params[item.key()] = item.value();
  at::NoGradGuard no_grad;
  for (const auto& [name, value] : zero::read_checkpoint_weights(dir, tag, at::kFloat)) {
    const auto it = params.find(name);
    ZERO_CHECK(it != params.end() && it->second.sizes() == value.sizes(), "--model ", path,
               ": checkpoint parameter ", name, " ", value.sizes(),
               " is not one of the model's of that shape");
    it->second.copy_(value);
  }
  return model;
}

// The next token from `logits` [vocab] (fp32 on the CPU).
// --check-kv-cache's comparison, position by position: the largest difference between the
// cached and uncached logits relative to the uncached ones' largest magnitude, and the first
// position whose most likely tokens differ, with the uncached logits' margin between the two
// (a near-tie, within the tolerance, is rounding; a wide margin is a wrong cache).
struct KvCacheCheck {
  int64_t positions = 0;
  int64_t past_context = 0;  // positions not compared
  double largest_relative = 0;
  int64_t first_divergence = -1;
  double divergence_margin = 0;

  void add(const at::Tensor& cached, const at::Tensor& uncached) {
    const double scale = std::max(uncached.abs().max().item<double>(), 1e-30);
    largest_relative = std::max(largest_relative,
                                (cached - uncached).abs().max().item<double>() / scale);
    const int64_t a = cached.argmax().item<int64_t>(), b = uncached.argmax().item<int64_t>();
    if (a != b && first_divergence < 0) {
      first_divergence = positions;
      divergence_margin =
          (uncached[b].item<double>() - uncached[a].item<double>()) / scale;
    }
    ++positions;
  }

  std::string describe(double tolerance) const {
    std::ostringstream text;
    text << positions << " positions";
    if (past_context > 0) text << " (and " << past_context << " past the context, not compared)";
    text << ", largest |cached - uncached| / max |logit| "
         << largest_relative << " (tolerance " << tolerance << "); ";
    if (first_divergence < 0) {
      text << "the same most likely token at every position";
    } else {
      text << "the most likely tokens first differ at position " << first_divergence
           << ", a margin of " << divergence_margin << " of max |logit| (a near-tie)";
    }
    return text.str();
  }
};

int64_t sample(at::Tensor logits, const Options& o, at::Generator& generator) {
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  logits = logits / o.temperature;
  at::Tensor candidates = at::arange(logits.size(0), at::kLong);
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    auto [top, index] = logits.topk(o.top_k);
    logits = top;
    candidates = index;
  }
  at::Tensor probs = logits.softmax(-1);
  if (o.top_p < 1.0) {
    auto [sorted, order] = probs.sort(/*dim=*/-1, /*descending=*/true);
    const at::Tensor before = sorted.cumsum(-1) - sorted;  // mass of the tokens ahead
    sorted.masked_fill_(before >= o.top_p, 0.0);           // the first always stays
    probs = at::zeros_like(probs).scatter_(0, order, sorted);
  }
  const int64_t pick = at::multinomial(probs, 1, false, generator).item<int64_t>();
  return candidates[pick].item<int64_t>();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"zero-generate: continue a prompt with a GPT-2, streamed"};
  app.add_option("--model", o.model,
                 "a Hugging Face GPT-2 directory, or a zero checkpoint (or run) directory")
      ->required();
  app.add_option("--prompt", o.prompt, "text to continue")->required();
  app.add_option("--max-tokens", o.max_tokens, "tokens to generate")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--temperature", o.temperature, "0: the most likely token each time")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  app.add_option("--top-k", o.top_k, "keep the k most likely tokens (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--top-p", o.top_p, "keep the most likely tokens up to this probability")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "the sampling generator's seed")->capture_default_str();
  app.add_option("--device", o.device, "cpu, or cuda (the model on the first GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  bool no_cache = false;
  app.add_flag("--no-kv-cache", no_cache, "run the whole context again for every token");
  app.add_flag("--check-kv-cache", o.check_kv_cache,
               "run both, with and without the KV cache, at every position (the cached run's "
               "tokens taken by both): their logits must agree within --tolerance of their "
               "largest magnitude; prints the largest difference and the first position where "
               "the two would choose differently (a near-tie passes); exit status 1 if not")
      ->excludes("--no-kv-cache");
  app.add_option("--tolerance", o.tolerance,
                 "--check-kv-cache's bound on |difference| / max |logit|")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--threads", o.threads, "libtorch threads (default: every core)")
      ->check(CLI::Range(0, cores));
  app.add_option("--encoder", o.encoder, "GPT-2 encoder.json")->capture_default_str();
  app.add_option("--vocab", o.vocab, "GPT-2 vocab.bpe")->capture_default_str();
  app.add_option("--tokenizer", o.tokenizer,
                 "a Hugging Face tokenizer.json (or its directory) instead of --encoder/--vocab "
                 "(default: the model directory's, when it has one)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "zero-generate: error: %s\nRun with --help for more information.\n",
                 e.what());
    return 2;
  }
  o.kv_cache = !no_cache;
  at::set_num_threads(o.threads > 0 ? o.threads : cores);
  try {
    at::Device device(at::kCPU);
    if (o.device == "cuda") {
      const zero::CudaSupport& cuda = zero::cuda_support();  // loads libtorch's CUDA
      ZERO_CHECK(cuda.cuda_device_count() > 0, "--device cuda: no CUDA device is visible");
      device = at::Device(at::kCUDA, 0);
    }
    const TextCodec codec = load_codec(o);
    const std::vector<int32_t> prompt = codec.encode(o.prompt);
    ZERO_CHECK(!prompt.empty(), "--prompt is empty");
    const auto model = load_model(o.model);
    const zero::CausalLMShape shape = model->causal_lm_config().shape();
    const int64_t context = shape.context_length;
    zero::check_tokenizer_fits(shape.vocab_size, codec.vocab_size, "--model " + o.model,
                               codec.what);
    model->to(device);
    model->eval();
    at::NoGradGuard no_grad;
    auto generator = at::make_generator<at::CPUGeneratorImpl>(o.seed);
    std::vector<int64_t> ids(prompt.begin(), prompt.end());
    zero::KVCache cache;
    const auto started = std::chrono::steady_clock::now();
    double first_token_seconds = 0;
    // The next position's logits, [vocab], from the whole context (the last `context` ids).
    const auto uncached_logits = [&] {
      const int64_t first = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - context);
      const at::Tensor input =
          at::tensor(std::vector<int64_t>(ids.begin() + first, ids.end()), at::kLong)
              .unsqueeze(0)
              .to(device);
      const at::Tensor all = model->forward(input);
      return all.select(1, all.size(1) - 1).squeeze(0);
    };
    KvCacheCheck check;
    for (int64_t produced = 0; produced < o.max_tokens; ++produced) {
      at::Tensor logits;  // the next position's, [vocab]
      if (o.kv_cache) {
        logits = model->next_logits(ids, cache, context);  // the prompt first, then one at a time
      } else {
        logits = uncached_logits();
      }
      const at::Tensor last = logits.to(at::kCPU, at::kFloat);
      // Past the context the two see different windows (the cache starts again from the last
      // half of it: CausalLM::next_logits), so only positions within it are compared.
      if (o.check_kv_cache) {
        if (static_cast<int64_t>(ids.size()) <= context) {
          check.add(last, uncached_logits().to(at::kCPU, at::kFloat));
        } else {
          ++check.past_context;
        }
      }
      const int64_t next = sample(last, o, generator);
      ids.push_back(next);
      // A padded model's ids past the tokenizer's print nothing (Note [Padded vocabularies]).
      const std::string bytes = next < codec.vocab_size ? codec.token_bytes(next) : "";
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
      std::fflush(stdout);
      if (produced == 0) {
        first_token_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("\n");
    std::fprintf(stderr,
                 "zero-generate: %lld tokens in %.2f s (%.1f tokens/s; %.1f after the first, "
                 "which took %.3f s with the prompt's %zu), %s, KV cache %s\n",
                 static_cast<long long>(o.max_tokens), seconds, o.max_tokens / seconds,
                 o.max_tokens > 1 ? (o.max_tokens - 1) / std::max(seconds - first_token_seconds, 1e-9)
                                  : 0.0,
                 first_token_seconds, prompt.size(), device.str().c_str(),
                 o.kv_cache ? "on" : "off");
    if (o.check_kv_cache) {
      const bool ok = check.largest_relative <= o.tolerance;
      std::fprintf(stderr, "zero-generate: KV-cache check %s: %s\n", ok ? "passed" : "FAILED",
                   check.describe(o.tolerance).c_str());
      return ok ? 0 : 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nzero-generate: error: %s\n", e.what());
    return 2;
  }
}
