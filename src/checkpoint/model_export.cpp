#include "zero/model_export.h"

#include <torch/nn/module.h>

#include <exception>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "zero/error.h"
#include "zero/safetensors.h"
#include "zero/state_dict.h"

namespace zero {
namespace {

// Trainable parameters of `model` as the engines name them: modules in pre-order, each
// parameter once under the name of its first registration (the rule zero::initialize uses).
std::vector<SafetensorsEntry> trainable_entries(const torch::nn::Module& model) {
  std::vector<SafetensorsEntry> entries;
  std::unordered_set<const void*> seen;
  auto add = [&](const std::string& prefix, const torch::nn::Module& module) {
    for (const auto& item : module.named_parameters(/*recurse=*/false)) {
      const at::Tensor& p = item.value();
      if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
      entries.push_back({prefix.empty() ? item.key() : prefix + "." + item.key(),
                         p.scalar_type(), p.sizes().vec()});
    }
  };
  add("", model);
  // include_self = false: `model` need not be owned by a shared_ptr.
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    add(item.key(), *item.value());
  }
  return entries;
}

}  // namespace

void save_16bit_model(Engine& engine, const torch::nn::Module& model, const std::string& path,
                      int root) {
  const Config& config = engine.config();
  ZERO_CHECK(config.zero_optimization.stage != 3 ||
                 config.zero_optimization.stage3_gather_16bit_weights_on_model_save,
             config.source, ": save_16bit_model at zero_optimization.stage = 3 needs ",
             "zero_optimization.stage3_gather_16bit_weights_on_model_save = true, but it is ",
             "false; set it to true in the config to gather the partitioned weights into '",
             path, "' (DeepSpeed would skip the save and return False)");
  ZERO_CHECK(root >= 0 && root < engine.world_size(), "save_16bit_model: root = ", root,
             " is out of range; allowed: 0..", engine.world_size() - 1);

  // On root, every failure is kept until the gathers are done: throwing from inside the
  // collective would leave the other ranks waiting for this one.
  const bool mine = engine.rank() == root;
  std::unique_ptr<SafetensorsWriter> writer;
  std::unordered_map<std::string, bool> pending;  // name -> not yet written
  std::exception_ptr failure;
  if (mine) {
    try {
      std::vector<SafetensorsEntry> entries = trainable_entries(model);
      for (const auto& entry : entries) pending.emplace(entry.name, true);
      writer = std::make_unique<SafetensorsWriter>(
          path, std::move(entries),
          std::map<std::string, std::string>{{"format", "pt"}, {"producer", "zero"}});
    } catch (...) {
      failure = std::current_exception();
    }
  }
  visit_full_parameters(
      engine,
      [&](const std::string& name, const at::Tensor& value) {
        if (failure) return;
        try {
          const auto found = pending.find(name);
          ZERO_CHECK(found != pending.end(), "save_16bit_model: the engine's parameter '", name,
                     "' is not a trainable parameter of the module passed in; pass the module ",
                     "given to zero::initialize");
          ZERO_INTERNAL_ASSERT(found->second, "parameter '", name, "' visited twice");
          found->second = false;
          writer->write(name, value);
        } catch (...) {
          failure = std::current_exception();
        }
      },
      root);
  if (failure) std::rethrow_exception(failure);  // ~SafetensorsWriter removes the .tmp file
  if (writer) writer->finish();  // names any parameter of `model` the engine did not visit
}

}  // namespace zero
