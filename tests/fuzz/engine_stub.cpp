// The one engine symbol the request parsers' objects reach (Metrics::attach, never called by
// fuzz_request_json): defined here so the target needs no engine, model or runtime.
#include "engine/async_engine.h"

namespace vllm {

void AsyncEngine::set_stats_observer(StatsObserver) {}

}  // namespace vllm
