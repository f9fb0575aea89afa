// Offline batch generation over the engine core (generate --input/--output).
#pragma once
#include <string>

#include "engine/engine_core.h"
#include "model/load.h"

namespace vllm::cli {

// Returns the exit status: 0, or 1 when some input lines were rejected (their output line
// holds {"error": ...}).
int run_batch(LoadedModel& model, const EngineConfig& config, const std::string& input,
              const std::string& output);

}  // namespace vllm::cli
