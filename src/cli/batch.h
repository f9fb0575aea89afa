// Offline batch generation over the engine core (generate --input/--output).
#pragma once
#include <string>

#include "engine/engine_core.h"
#include "model/load.h"

namespace vllm::cli {

// Returns the exit status: 0, or 1 when some input lines were rejected (their output line
// holds {"error": ...}) or the engine failed (its requests end with finish_reason "error"
// and the reason on stderr). group: node 0's group when the ranks span processes.
int run_batch(LoadedModel& model, const EngineConfig& config, const std::string& input,
              const std::string& output, NodeGroup* group = nullptr);

}  // namespace vllm::cli
