// Exporting the trained weights as one safetensors file (DeepSpeed's save_16bit_model).
#pragma once

#include "zero/export.h"

#include <string>

#include "zero/engine.h"

namespace torch::nn {
class Module;
}

namespace zero {

/// Collective: every rank calls it. Writes the whole trainable parameters of `model` (the
/// module given to zero::initialize) to the safetensors file `path` on rank `root`, in the
/// engine's parameter dtype (bf16/fp16 under mixed precision, else fp32), under their module
/// names (Hugging Face's names for zero::gpt2), shared parameters once under the name of their
/// first registration (modules in pre-order), with metadata {"format": "pt", "producer":
/// "zero"}. Only parameters with requires_grad are written; buffers and frozen parameters are not.
///
/// At stage 3 the config must set zero_optimization.stage3_gather_16bit_weights_on_model_save
/// to true (DeepSpeed skips the save and returns False otherwise; we throw zero::Error on every
/// rank before any communication). Parameters are gathered one unit at a time and streamed to
/// the file (zero::visit_full_parameters and zero::SafetensorsWriter), so `root` never holds
/// more than one unit beyond its usual state. The file appears atomically (written to
/// `path + ".tmp"`, then renamed). Other ranks write nothing.
///
/// An I/O error on `root` is thrown on `root` only, after the collective gathers completed,
/// so the other ranks return normally and never wait on it.
ZERO_API void save_16bit_model(Engine& engine, const torch::nn::Module& model, const std::string& path,
                      int root = 0);

}  // namespace zero
