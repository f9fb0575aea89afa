#include "server/stream_pump.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/log.h"
#include "server/sse.h"

namespace vllm::server {

namespace {

using Clock = std::chrono::steady_clock;
// How often the pump checks the drain deadline and clients that stopped reading.
constexpr auto kTick = std::chrono::milliseconds(100);
constexpr uint64_t kWakeKey = 0;  // the epoll key of the wake eventfd; streams count from 1
// A stream's kernel send buffer. Left to autotuning it grows to tcp_wmem's maximum (4 MiB
// here) for a client that stops reading, which then holds that much kernel memory, and a
// token stream's few KB/s take minutes to fill it before the write timeout can see the stall.
constexpr int kStreamSendBuffer = 128 << 10;

thread_local std::shared_ptr<PumpedStream> handed_off;

// One chunk of HTTP/1.1 chunked transfer coding, as httplib frames them (lowercase hex size).
void append_chunk(std::string& out, const std::string& payload) {
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", payload.size());
  out += size;
  out += payload;
  out += "\r\n";
}

}  // namespace

void hand_off_stream(std::shared_ptr<PumpedStream> stream) { handed_off = std::move(stream); }

std::shared_ptr<PumpedStream> take_handed_off_stream() { return std::move(handed_off); }

struct StreamPump::Stream {
  int sock;
  std::shared_ptr<PumpedStream> s;
  Finished finished;
  std::string pending;               // framed bytes not yet written
  size_t sent = 0;                   // of `pending`
  bool ending = false;               // the terminating chunk is in `pending`
  bool waiting_out = false;          // registered for EPOLLOUT: the socket buffer was full
  Clock::time_point blocked_since;   // when a write last found it full without progress
};

struct StreamPump::Idle {
  int sock;
  Clock::time_point deadline;
  std::function<void(bool)> then;
};

struct StreamPump::Loop {
  explicit Loop(int write_timeout_ms) : write_timeout(std::chrono::milliseconds(write_timeout_ms)) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeKey;
    if (epoll < 0 || wake < 0 || epoll_ctl(epoll, EPOLL_CTL_ADD, wake, &ev) != 0)
      throw std::runtime_error("stream pump: cannot create its epoll instance");
    thread = std::thread([this] {
      pthread_setname_np(pthread_self(), "stream-pump");
      run();
    });
  }
  ~Loop() {
    {
      std::lock_guard lock(mutex);
      stop = true;
      signal_locked();
    }
    thread.join();
    close(wake);
    close(epoll);
  }

  void add(std::unique_ptr<Stream> s) {
    {
      std::lock_guard lock(mutex);
      if (!stop) {
        incoming.push_back(std::move(s));
        signal_locked();
        return;
      }
    }
    s->finished(false);
  }

  void add(Idle w) {
    {
      std::lock_guard lock(mutex);
      if (!stop) {
        incoming_idle.push_back(std::move(w));
        signal_locked();
        return;
      }
    }
    w.then(false);
  }

 private:
  // The engine thread, through a Generation's listener: stream `key` has outputs.
  void mark_ready(uint64_t key) {
    std::lock_guard lock(mutex);
    ready.push_back(key);
    signal_locked();
  }
  void signal_locked() {
    if (signalled) return;
    signalled = true;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake, &one, sizeof one);
  }

  void run() {
    epoll_event events[256];
    auto next_tick = Clock::now() + kTick;
    for (;;) {
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - Clock::now());
      const int n = epoll_wait(epoll, events, 256, static_cast<int>(std::max<int64_t>(wait.count(), 0)));
      for (int i = 0; i < n; ++i) on_event(events[i]);
      std::vector<std::unique_ptr<Stream>> fresh;
      std::vector<Idle> fresh_idle;
      std::vector<uint64_t> woken;
      {
        std::lock_guard lock(mutex);
        if (stop) break;
        fresh.swap(incoming);
        fresh_idle.swap(incoming_idle);
        woken.swap(ready);
        signalled = false;
      }
      for (auto& s : fresh) adopt(std::move(s));
      for (Idle& w : fresh_idle) adopt(std::move(w));
      std::sort(woken.begin(), woken.end());
      woken.erase(std::unique(woken.begin(), woken.end()), woken.end());
      for (uint64_t key : woken) pump(key);
      if (Clock::now() >= next_tick) {
        tick();
        next_tick = Clock::now() + kTick;
      }
    }
    for (auto& s : incoming) s->finished(false);
    for (Idle& w : incoming_idle) w.then(false);
    while (!streams.empty()) end(streams.begin()->first, false);
    while (!idle.empty()) wake_idle(idle.begin()->first, false);
  }

  void on_event(const epoll_event& ev) {
    if (ev.data.u64 == kWakeKey) {
      uint64_t count;
      [[maybe_unused]] ssize_t n = ::read(wake, &count, sizeof count);
      return;
    }
    if (idle.count(ev.data.u64)) {
      wake_idle(ev.data.u64, (ev.events & EPOLLIN) != 0);
      return;
    }
    if (!streams.count(ev.data.u64)) return;
    if (ev.events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
      end(ev.data.u64, false);  // the client left: its generation is aborted
    else if (ev.events & EPOLLOUT)
      flush(ev.data.u64);
  }

  void adopt(std::unique_ptr<Stream> s) {
    const uint64_t key = next_key++;
    epoll_event ev{};
    ev.events = EPOLLRDHUP;
    ev.data.u64 = key;
    if (epoll_ctl(epoll, EPOLL_CTL_ADD, s->sock, &ev) != 0) {
      log_error("stream pump: cannot watch a client socket");
      s->finished(false);
      return;
    }
    Generation& gen = *s->s->gen;
    streams.emplace(key, std::move(s));
    gen.set_listener([this, key] { mark_ready(key); });
    pump(key);  // what arrived before the listener was set
  }

  void adopt(Idle w) {
    const uint64_t key = next_key++;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = key;
    if (epoll_ctl(epoll, EPOLL_CTL_ADD, w.sock, &ev) != 0) {
      w.then(false);
      return;
    }
    idle.emplace(key, std::move(w));
  }

  void wake_idle(uint64_t key, bool readable) {
    const auto it = idle.find(key);
    Idle w = std::move(it->second);
    idle.erase(it);
    epoll_ctl(epoll, EPOLL_CTL_DEL, w.sock, nullptr);
    w.then(readable);
  }

  // Formats the outputs that arrived and writes them. Nothing may escape the pump's thread.
  void pump(uint64_t key) {
    const auto it = streams.find(key);
    if (it == streams.end()) return;
    Stream& st = *it->second;
    if (!st.ending) {
      Generation& gen = *st.s->gen;
      EventFormatter& fmt = *st.s->formatter;
      try {
        std::vector<std::string> events;
        if (!gen.done())
          for (const TaggedOutput& o : gen.next(std::chrono::milliseconds(0))) fmt.output(o, events);
        st.ending = gen.done();
        if (st.ending) fmt.finish(events);
        std::string payload;
        for (const std::string& e : events) payload += fmt.frame(e);
        if (st.ending) payload += fmt.end_frame();
        if (!payload.empty()) append_chunk(st.pending, payload);
        if (st.ending) st.pending += "0\r\n\r\n";
      } catch (const ApiError& e) {
        // The request failed on its own input after the head went out: an error event and
        // a well-formed end, so the connection stays usable.
        log_error("stream " + gen.id() + " failed: " + e.what());
        append_chunk(st.pending, fmt.error_frame(e.status(), e.what()));
        st.pending += "0\r\n\r\n";
        st.ending = true;
      } catch (const std::exception& e) {
        log_error("stream " + gen.id() + " failed: " + e.what());
        end(key, false);
        return;
      }
    }
    flush(key);
  }

  void flush(uint64_t key) {
    Stream& st = *streams.at(key);
    bool progressed = false;
    while (st.sent < st.pending.size()) {
      const ssize_t n = send(st.sock, st.pending.data() + st.sent, st.pending.size() - st.sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        st.sent += static_cast<size_t>(n);
        progressed = true;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (progressed || !st.waiting_out) st.blocked_since = Clock::now();
        if (!st.waiting_out) watch(key, st, EPOLLRDHUP | EPOLLOUT);
        return;
      } else {
        end(key, false);  // the client is gone
        return;
      }
    }
    st.pending.clear();
    st.sent = 0;
    if (st.waiting_out) watch(key, st, EPOLLRDHUP);
    if (st.ending) end(key, true);
  }

  void watch(uint64_t key, Stream& st, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = key;
    epoll_ctl(epoll, EPOLL_CTL_MOD, st.sock, &ev);
    st.waiting_out = (events & EPOLLOUT) != 0;
  }

  // The drain deadline (ctx.abort_all), clients that stopped reading for the write timeout,
  // and idle connections past their keep-alive timeout.
  void tick() {
    const auto now = Clock::now();
    std::vector<uint64_t> stalled, expired;
    for (auto& [key, st] : streams) {
      st->s->gen->abort_if_draining();
      if (st->waiting_out && now - st->blocked_since > write_timeout) stalled.push_back(key);
    }
    for (uint64_t key : stalled) end(key, false);
    for (auto& [key, w] : idle)
      if (now >= w.deadline) expired.push_back(key);
    for (uint64_t key : expired) wake_idle(key, false);
  }

  // The stream leaves the pump: its generation ends here (aborted unless it finished), which
  // is when ctx.in_flight drops; then the connection goes back (ok) or is closed.
  void end(uint64_t key, bool ok) {
    const auto it = streams.find(key);
    std::unique_ptr<Stream> st = std::move(it->second);
    streams.erase(it);
    epoll_ctl(epoll, EPOLL_CTL_DEL, st->sock, nullptr);
    st->s->gen->set_listener(nullptr);
    Finished finished = std::move(st->finished);
    st.reset();
    finished(ok);
  }

  const Clock::duration write_timeout;
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::mutex mutex;  // guards the five below
  std::vector<std::unique_ptr<Stream>> incoming;
  std::vector<Idle> incoming_idle;
  std::vector<uint64_t> ready;
  bool signalled = false;  // the wake eventfd was written since the loop last emptied them
  bool stop = false;
  // The pump thread's own.
  std::unordered_map<uint64_t, std::unique_ptr<Stream>> streams;
  std::unordered_map<uint64_t, Idle> idle;
  uint64_t next_key = kWakeKey + 1;
  std::thread thread;
};

StreamPump::StreamPump(int write_timeout_ms) : loop_(std::make_unique<Loop>(write_timeout_ms)) {}

StreamPump::~StreamPump() = default;

void StreamPump::add(int sock, std::shared_ptr<PumpedStream> stream, Finished finished) {
  setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &kStreamSendBuffer, sizeof kStreamSendBuffer);
  auto s = std::make_unique<Stream>();
  s->sock = sock;
  s->s = std::move(stream);
  s->finished = std::move(finished);
  loop_->add(std::move(s));
}

void StreamPump::await_request(int sock, std::chrono::milliseconds idle,
                               std::function<void(bool)> then) {
  loop_->add(Idle{sock, Clock::now() + idle, std::move(then)});
}

}  // namespace vllm::server
