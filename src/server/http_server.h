// The OpenAI-compatible HTTP server: loads the model, starts the engine, serves the routes
// until SIGTERM/SIGINT, then drains (503 for new work, in-flight requests get
// drain_timeout_s before they are aborted) and returns the process exit code.
#pragma once
#include "server/serving.h"

namespace vllm::server {

int run_server(ServerConfig config);

}  // namespace vllm::server
