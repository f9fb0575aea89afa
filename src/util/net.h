// TCP between the nodes of a tensor-parallel group (runtime/node_group.h): a listening socket,
// connections with deadlines, and length-framed messages with a small binary codec. Blocking
// sockets; a closed connection or a shut-down socket throws ConnectionClosed.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "util/check.h"

namespace vllm::net {

class ConnectionClosed : public Error {
 public:
  using Error::Error;
};

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Every byte, or ConnectionClosed (the peer went away, or shutdown() was called).
  void send_all(const void* data, size_t n);
  void recv_all(void* data, size_t n);
  // Ends both directions from any thread: a send or receive blocked on it returns.
  void shutdown();
  // A receive that waits longer than this throws ConnectionClosed (0: wait for ever).
  void set_receive_timeout(double seconds);

 private:
  int fd_ = -1;
};

// A socket listening on addr:port (addr a host name or address; "" or "0.0.0.0": all).
Socket listen_tcp(const std::string& addr, int port);
// The next connection, or Error after timeout_s seconds.
Socket accept_tcp(const Socket& listener, double timeout_s);
// A connection to addr:port, retried until it is accepted or timeout_s seconds have passed
// (the peer may not listen yet).
Socket connect_tcp(const std::string& addr, int port, double timeout_s);

// A message: a tag and a payload, framed as u32 tag, u64 length, bytes.
struct Message {
  uint32_t tag = 0;
  std::string payload;
};
void send_message(Socket& s, uint32_t tag, std::string_view payload);
// A message claiming more than max_bytes is an error (not a peer of ours).
Message recv_message(Socket& s, uint64_t max_bytes = uint64_t(1) << 30);

// Little binary codec for payloads: fixed-width numbers, strings and vectors of numbers.
class Writer {
 public:
  template <typename T>
  Writer& put(T v) {
    static_assert(std::is_arithmetic_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Writer& put(std::string_view s) {
    put<uint64_t>(s.size());
    out_.append(s);
    return *this;
  }
  template <typename T>
  Writer& put(const std::vector<T>& v) {
    static_assert(std::is_arithmetic_v<T>);
    put<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  T get() {
    static_assert(std::is_arithmetic_v<T>);
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  std::string get_string() {
    const uint64_t n = get<uint64_t>();
    return std::string(take(n), n);
  }
  template <typename T>
  std::vector<T> get_vector() {
    const uint64_t n = get<uint64_t>();
    VLLM_CHECK(n <= in_.size() / sizeof(T), "message: a vector of ", n, " past its end");
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), take(n * sizeof(T)), n * sizeof(T));
    return v;
  }
  bool done() const { return in_.empty(); }

 private:
  const char* take(uint64_t n) {
    VLLM_CHECK(n <= in_.size(), "message: ", n, " bytes wanted, ", in_.size(), " left");
    const char* p = in_.data();
    in_.remove_prefix(n);
    return p;
  }
  std::string_view in_;
};

}  // namespace vllm::net
