#include "server/sse.h"

#include <httplib.h>

#include "server/log.h"

namespace vllm::server {

namespace {

struct StreamState {
  std::shared_ptr<Generation> gen;
  std::shared_ptr<EventFormatter> formatter;
};

// One provider call: waits briefly for outputs and writes their events. False: stop.
bool write_events(StreamState& s, httplib::DataSink& sink) {
  std::vector<std::string> events;
  if (!s.gen->done())
    for (const TaggedOutput& o : s.gen->next(std::chrono::milliseconds(250)))
      s.formatter->output(o, events);
  const bool end = s.gen->done();
  if (end) s.formatter->finish(events);
  std::string buf;
  const bool raw = s.formatter->raw_frames();
  for (const std::string& e : events) buf += raw ? e : "data: " + e + "\n\n";
  if (end && !raw) buf += "data: [DONE]\n\n";
  if (!buf.empty() && !sink.write(buf.data(), buf.size())) {
    s.gen->abort();  // the client is gone
    return false;
  }
  if (end) sink.done();
  return true;
}

}  // namespace

void stream_events(httplib::Response& res, std::shared_ptr<Generation> gen,
                   std::shared_ptr<EventFormatter> formatter) {
  auto st = std::make_shared<StreamState>(StreamState{std::move(gen), std::move(formatter)});
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        // httplib runs the provider outside its handler try-block: nothing may escape.
        try {
          return write_events(*st, sink);
        } catch (const std::exception& e) {
          log_error(std::string("stream ") + st->gen->id() + " failed: " + e.what());
          st->gen->abort();
          return false;
        }
      },
      [st](bool success) {
        if (!success) st->gen->abort();
      });
}

}  // namespace vllm::server
