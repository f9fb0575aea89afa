// The stream pump: one thread and an epoll loop that own every server-sent-event stream once
// its response head is written, so N streams hold no connection threads. The engine wakes it
// (Generation::set_listener) when outputs arrive; it frames their events as HTTP chunks, writes
// them without blocking (a per-stream pending buffer, EPOLLOUT when the socket is full), aborts
// a generation whose client left (EPOLLRDHUP/EPOLLHUP/EPOLLERR) or stopped reading for the
// write timeout, and hands the connection back when the terminating chunk is written. It also
// watches kept-alive connections for their next request, so idle ones hold no thread either.
#pragma once
#include <chrono>
#include <functional>
#include <memory>

namespace vllm::server {

class EventFormatter;
class Generation;

// One response's stream, from the handler (stream_events) to the pump.
struct PumpedStream {
  std::shared_ptr<Generation> gen;
  std::shared_ptr<EventFormatter> formatter;
};

// The connection thread's slot: stream_events' content provider leaves its stream here once
// httplib wrote the response head; the connection loop takes it after the request.
void hand_off_stream(std::shared_ptr<PumpedStream> stream);
std::shared_ptr<PumpedStream> take_handed_off_stream();

class StreamPump {
 public:
  // Called on the pump's thread once the stream left the pump: `ok` when the terminating
  // chunk was written (the connection may read its next request), else the connection is
  // broken and must be closed.
  using Finished = std::function<void(bool ok)>;

  explicit StreamPump(int write_timeout_ms);
  ~StreamPump();  // finishes every stream left (ok = false)
  StreamPump(const StreamPump&) = delete;
  StreamPump& operator=(const StreamPump&) = delete;

  // Streams `stream` on `sock` (its head already written) until it ends; any thread.
  void add(int sock, std::shared_ptr<PumpedStream> stream, Finished finished);
  // Calls `then(true)` on the pump's thread once `sock` has bytes to read (or has been closed
  // by the peer after sending some), `then(false)` when the peer closes first or `idle` passes.
  void await_request(int sock, std::chrono::milliseconds idle, std::function<void(bool)> then);

 private:
  struct Stream;
  struct Idle;
  struct Loop;
  std::unique_ptr<Loop> loop_;
};

}  // namespace vllm::server
