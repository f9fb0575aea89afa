#include "server/sse.h"

#include <httplib.h>

namespace vllm::server {

void stream_events(httplib::Response& res, std::shared_ptr<Generation> gen,
                   std::shared_ptr<EventFormatter> formatter) {
  struct State {
    std::shared_ptr<Generation> gen;
    std::shared_ptr<EventFormatter> formatter;
    bool started = false;
  };
  auto st = std::make_shared<State>(State{std::move(gen), std::move(formatter)});
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        std::vector<std::string> events;
        if (!st->started) {
          st->started = true;
          st->formatter->start(events);
        }
        if (!st->gen->done())
          for (const TaggedOutput& o : st->gen->next(std::chrono::milliseconds(250)))
            st->formatter->output(o, events);
        const bool end = st->gen->done();
        if (end) st->formatter->finish(events);
        std::string buf;
        for (const std::string& e : events) buf += "data: " + e + "\n\n";
        if (end) buf += "data: [DONE]\n\n";
        if (!buf.empty() && !sink.write(buf.data(), buf.size())) {
          st->gen->abort();
          return false;
        }
        if (end) sink.done();
        return true;
      },
      [st](bool success) {
        if (!success) st->gen->abort();
      });
}

}  // namespace vllm::server
