#include "server/sse.h"

#include <httplib.h>

#include "server/api_error.h"
#include "server/stream_pump.h"

namespace vllm::server {

std::string EventFormatter::error_frame(int status, const std::string& message) {
  return frame(error_json(status, message).dump()) + end_frame();
}

void stream_events(httplib::Response& res, std::shared_ptr<Generation> gen,
                   std::shared_ptr<EventFormatter> formatter) {
  auto st = std::make_shared<PumpedStream>(PumpedStream{std::move(gen), std::move(formatter)});
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // httplib calls the provider once it wrote the head (chunked transfer coding): the stream
  // goes to the connection loop, which hands it to the stream pump. False ends httplib's part
  // of the response. Never called (a HEAD request): the Generation dies with `res`, aborted.
  res.set_chunked_content_provider("text/event-stream", [st](size_t, httplib::DataSink&) {
    hand_off_stream(st);
    return false;
  });
}

}  // namespace vllm::server
