// Server-sent events over a chunked response: `data: {json}\n\n` per event, then
// `data: [DONE]\n\n` (OpenAI's framing; a formatter may frame its events itself). httplib
// writes the head; the stream pump (stream_pump.h) writes the events, on no thread of the
// connection's. A write that fails (client gone, or not reading for the write timeout) aborts
// the generation, so its KV blocks are freed.
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
  // The bytes sent for one event, and after the last one.
  virtual std::string frame(const std::string& event) const { return "data: " + event + "\n\n"; }
  virtual std::string end_frame() const { return "data: [DONE]\n\n"; }
  // The bytes that end a stream whose request failed after its head was sent (an error
  // event, then what end_frame would send). OpenAI's framing: the error JSON as one event.
  virtual std::string error_frame(int status, const std::string& message);
};

void stream_events(httplib::Response& res, std::shared_ptr<Generation> gen,
                   std::shared_ptr<EventFormatter> formatter);

}  // namespace vllm::server
