// zero-train, phase 6 (Note [zero-train's phases] in trainer.h): the training loop, with
// validation, samples and checkpoints.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

#include "trainer.h"
#include "zero/console.h"
#include "zero/error.h"

namespace zero::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double all_mean(Communicator& comm, double value) {
  at::Tensor t = at::full({1}, value, at::kDouble);
  comm.all_reduce(t, ReduceOp::kSum)->wait();
  return t.item<double>() / comm.size();
}

// Mean validation loss over `batches` windows per rank, averaged over ranks.
double evaluate(CausalLM& model, const EvalBatcher& val, Communicator& comm,
                const at::Device& device) {
  at::NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (int64_t b = 0; b < val.num_batches(); ++b) {
    auto [x, y] = val.batch(b);
    total += model.forward_loss(x.to(device), y.to(device)).item<double>();
  }
  model.train();
  return all_mean(comm, total / std::max<int64_t>(val.num_batches(), 1));
}

// Rank 0's lines before the first step: what trains on what, and every note of the phases.
void announce(const Options& o, const Inputs& in, const Planned& p, const Trainee& t,
              const Resumed& r, Communicator& comm, Progress& progress) {
  const Config& config = in.config;
  std::ostringstream head;
  head << "zero-train: " << o.model << " (" << t.engine->num_parameters() / 1e6
       << "M parameters), ZeRO stage " << config.zero_optimization.stage << ", " << comm.size()
       << " rank(s), micro-batch " << config.train_micro_batch_size_per_gpu << " x " << in.seq
       << " tokens, accumulation " << config.gradient_accumulation_steps << ", global batch "
       << config.train_batch_size << " sequences; data " << in.data << "_{train,val}.bin ("
       << in.train->size() << " / " << in.val->size() << " tokens)";
  if (in.shape.checkpointed_blocks > 0) {
    head << "; activation checkpointing: " << in.shape.checkpointed_blocks << " of "
         << in.shape.num_layers << " blocks recomputed in backward";
  }
  progress.message(head.str());
  // Note [Topology]: where the ranks run, once.
  if (comm.size() > 1) progress.message("ranks: " + comm.topology().describe());
  for (const std::string* note : {&in.data_note, &in.eval_note, &t.init_note, &p.fitted}) {
    if (!note->empty()) progress.message(*note);
  }
  progress.message(t.estimate);
  if (!r.from.note.empty()) progress.message(r.from.note);
  if (!r.from.dir.empty()) {
    progress.message("resuming from " + r.from.dir + "/" + r.from.tag + " after step " +
                     std::to_string(r.first_step) + ": training steps " +
                     std::to_string(r.first_step + 1) + ".." + std::to_string(o.steps));
  }
  for (const std::string& note : r.notes) progress.message(note);
}

// Collective. A checkpoint after step `done`, whose CSV row is already written (Note [Resuming
// zero-train]); its client state records what a resume checks and the model's config.json.
void save(const Options& o, const Inputs& in, Trainee& t, int64_t done, Communicator& comm,
          Progress& progress) {
  const auto t0 = Clock::now();
  const Config& config = in.config;
  const nlohmann::json client = {{"next_step", done},         {"model", o.model},
                                 {"data", o.data},            {"seq_len", in.seq},
                                 {"train_batch_size", config.train_batch_size},
                                 {"seed", config.seed},       {"world_size", comm.size()},
                                 {"stage", config.zero_optimization.stage},
                                 // The model's whole shape, as Hugging Face's config.json:
                                 // zero-ckpt export writes it beside the weights.
                                 {"model_config", nlohmann::json::parse(in.model->hf_config_json())}};
  const std::string dir = checkpoint_dir(o);
  const std::string tag = t.engine->save_checkpoint(dir, "", client.dump());
  if (comm.rank() == 0) {
    char line[64];
    std::snprintf(line, sizeof(line), " (%.2f s)", seconds_since(t0));
    progress.message("step " + std::to_string(done) + ": saved checkpoint " + dir + "/" + tag +
                     line);
  }
}

// Collective. Optimizer step `step` (0-based): its micro-batches forward and backward, the
// engine's step, and its record; the bytes it moved added to `trained`.
StepRecord train_step(const Inputs& in, const Planned& p, Trainee& t, int64_t step,
                      Communicator& comm, Trained& trained) {
  const Config& config = in.config;
  const auto t0 = Clock::now();
  const int64_t skipped_before = t.engine->skipped_steps();
  const CommStats before = t.engine->communication();
  const int gas = static_cast<int>(config.gradient_accumulation_steps);
  // The micro-batches' losses summed where they are (fp64, in micro-batch order) and read once,
  // after the step's work is launched: a read between a forward and its backward would stop
  // the host until a GPU had finished the forward (Note [A step without a device read]).
  at::Tensor loss_total;
  for (int micro = 0; micro < gas; ++micro) {
    auto [x, y] = in.sampler->batch(step, micro);
    // The fused head and loss (Note [Fused LM-head cross-entropy]): no [B, T, vocab] logits.
    at::Tensor loss = t.model->forward_loss(x.to(p.device), y.to(p.device));
    t.engine->backward(loss);
    t.engine->step();
    const at::Tensor value = loss.detach().to(at::kDouble);
    loss_total = loss_total.defined() ? loss_total + value : value;
  }
  const double loss_sum = loss_total.item<double>();
  const CommStats after = t.engine->communication();
  // ZeRO++'s qgZ exchanges the gradients across nodes by all_to_all: the reduce-scatter's.
  trained.reduce_scatter_bytes += after.reduce_scatter.bytes - before.reduce_scatter.bytes +
                                  after.all_to_all.bytes - before.all_to_all.bytes;
  trained.all_gather_bytes += after.all_gather.bytes - before.all_gather.bytes;
  trained.inter_node_bytes += after.inter_node_bytes - before.inter_node_bytes;
  StepRecord r;
  r.step = step + 1;
  r.loss = all_mean(comm, loss_sum / gas);
  r.lr = t.engine->learning_rate();
  r.grad_norm = t.engine->global_grad_norm();
  r.loss_scale = t.engine->loss_scale();
  r.skipped = t.engine->skipped_steps() > skipped_before;
  r.step_ms = seconds_since(t0) * 1000.0;
  r.tokens_per_second = config.train_batch_size * in.seq / (r.step_ms / 1000.0);
  return r;
}

// Beside the engine's own events (loss, lr, grad norm) in the config's monitors.
void write_monitor_events(const StepRecord& r, const Config& config, Engine& engine) {
  const int64_t samples = r.step * config.train_batch_size;
  std::vector<MonitorEvent> events = {
      {"Train/Samples/tokens_per_second", r.tokens_per_second, samples}};
  if (r.val_loss >= 0) events.push_back({"Train/Samples/val_loss", r.val_loss, samples});
  engine.write_monitor_events(events);
}

// Rank 0: the step's CSV row and progress line, and its validation loss and sample if any.
void report_step(const StepRecord& r, const std::optional<std::string>& sampled, bool last,
                 double eta_seconds, Resumed& resumed, Progress& progress) {
  resumed.csv->append(r);
  progress.update(r, eta_seconds);
  if (r.val_loss >= 0 && !last) {
    char line[96];
    std::snprintf(line, sizeof(line), "step %lld: validation loss %.4f",
                  static_cast<long long>(r.step), r.val_loss);
    progress.message(line);
  }
  if (sampled) progress.message("sample: " + *sampled);
}

}  // namespace

std::string sample_text(CausalLM& model, const RunTokenizer& tokenizer, int64_t tokens,
                        int64_t context, uint64_t seed) {
  // Top-k sampling (k 40, temperature 0.8) from the start id, seeded so runs are reproducible.
  // With the KV cache and the last position's logits only, as zero-generate: each token costs
  // one position (the whole context's [T, vocab] logits per token took 35 % more memory than
  // the training step on gpt2-tiny), so sampling stays inside the training step's memory plan.
  at::NoGradGuard no_grad;
  model.eval();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<int64_t> ids = {tokenizer.start_id()};  // the prompt
  KVCache cache;
  for (int64_t i = 0; i < tokens; ++i) {
    // Drawn on the host with the seeded CPU generator, whatever the device.
    const at::Tensor logits = model.next_logits(ids, cache, context).to(at::kCPU, at::kFloat);
    auto [top, index] = logits.div(0.8).topk(40);
    const at::Tensor choice = at::multinomial(top.softmax(-1), 1, false, generator);
    ids.push_back(index[choice.item<int64_t>()].item<int64_t>());
  }
  model.train();
  return tokenizer.decode(std::vector<int64_t>(ids.begin() + 1, ids.end()));
}

Trained train(const Options& o, Inputs& in, const Planned& p, Trainee& t, Resumed& resumed,
              Communicator& comm) {
  const bool rank0 = comm.rank() == 0;
  Progress progress(o.steps, stdout_is_terminal());
  if (rank0) announce(o, in, p, t, resumed, comm, progress);
  Trained trained;
  trained.records = resumed.records;
  trained.before = t.engine->communication();
  const auto start = Clock::now();
  for (int64_t step = resumed.first_step; step < o.steps; ++step) {
    StepRecord r = train_step(in, p, t, step, comm, trained);
    const bool last = step + 1 == o.steps;
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last) {
      r.val_loss = trained.last_val = evaluate(*t.model, *in.val_batches, comm, p.device);
    }
    write_monitor_events(r, in.config, *t.engine);
    // Every rank samples (the same tokens; rank 0 prints them): a forward may be collective
    // (at stage 3 it gathers each unit's parameters), so no rank may skip it.
    std::optional<std::string> sampled;
    if (o.sample_every > 0 && (step + 1) % o.sample_every == 0 && !last) {
      sampled = sample_text(*t.model, in.tokenizer, o.sample_tokens, in.seq, in.config.seed + step);
    }
    trained.records.push_back(r);
    if (rank0) {
      const double eta = seconds_since(start) / (step + 1 - resumed.first_step) *
                         static_cast<double>(o.steps - step - 1);
      report_step(r, sampled, last, eta, resumed, progress);
    }
    if (o.save_every > 0 && ((step + 1) % o.save_every == 0 || last)) {
      save(o, in, t, step + 1, comm, progress);
    }
  }
  trained.seconds = seconds_since(start);
  if (rank0) progress.finish();
  return trained;
}

}  // namespace zero::train
