// Server-sent events over an httplib chunked response: `data: {json}\n\n` per event, then
// `data: [DONE]\n\n` (or the formatter's own frames). A write that fails (client gone, or not
// reading for the write timeout) aborts the generation, so its KV blocks are freed.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "server/generation.h"

namespace httplib {
struct Response;
}

namespace vllm::server {

// Formats one request's outputs as event payloads (JSON text without the "data: " framing).
class EventFormatter {
 public:
  virtual ~EventFormatter() = default;
  virtual void output(const TaggedOutput& o, std::vector<std::string>& events) = 0;
  // After every completion finished: e.g. the usage chunk.
  virtual void finish(std::vector<std::string>& events) = 0;
  // True: each event is a whole SSE frame (e.g. "event: <type>\ndata: {json}\n\n") and the
  // stream ends without "data: [DONE]" (the Responses API).
  virtual bool raw_frames() const { return false; }
};

void stream_events(httplib::Response& res, std::shared_ptr<Generation> gen,
                   std::shared_ptr<EventFormatter> formatter);

}  // namespace vllm::server
