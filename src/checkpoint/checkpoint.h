// Sharded checkpoints of an engine (Note [Checkpoint format] in checkpoint.cpp). The public
// entry points are Engine::save_checkpoint / load_checkpoint (zero/engine.h).
#pragma once

#include <string>

namespace zero {

class EngineCore;

/// Collective. Returns the tag written.
std::string save_checkpoint(EngineCore& engine, const std::string& dir, const std::string& tag,
                            const std::string& client_state);
/// Collective. Engine::check_checkpoint_destination: `dir` writable from every rank, with room
/// for one more checkpoint; throws CollectiveError on every rank otherwise.
void check_checkpoint_destination(EngineCore& engine, const std::string& dir);
/// Collective. Returns the saved client state (JSON text).
std::string load_checkpoint(EngineCore& engine, const std::string& dir, const std::string& tag);

}  // namespace zero
