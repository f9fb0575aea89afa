#include "util/net.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

namespace vllm::net {
namespace {

std::string errno_text() { return std::strerror(errno); }

// The addresses of host:port (numeric or by name).
struct AddrList {
  addrinfo* list = nullptr;
  AddrList(const std::string& host, int port, bool passive) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (passive) hints.ai_flags = AI_PASSIVE;
    const std::string service = std::to_string(port);
    const char* node = host.empty() || (passive && host == "0.0.0.0") ? nullptr : host.c_str();
    if (const int rc = getaddrinfo(node, service.c_str(), &hints, &list); rc != 0)
      throw Error(host + ":" + service + ": " + gai_strerror(rc));
  }
  ~AddrList() { freeaddrinfo(list); }
};

void no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

void Socket::send_all(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw ConnectionClosed("connection lost while sending: " + errno_text());
    p += k;
    n -= size_t(k);
  }
}

void Socket::recv_all(void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd_, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) throw ConnectionClosed("connection closed by the peer");
    if (k < 0) throw ConnectionClosed("connection lost while receiving: " + errno_text());
    p += k;
    n -= size_t(k);
  }
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::set_receive_timeout(double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - double(tv.tv_sec)) * 1e6);
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

Socket listen_tcp(const std::string& addr, int port) {
  AddrList addrs(addr, port, true);
  std::string why = "no address";
  for (addrinfo* a = addrs.list; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) continue;
    const int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), SOMAXCONN) == 0)
      return s;
    why = errno_text();
  }
  throw Error("cannot listen on " + addr + ":" + std::to_string(port) + ": " + why);
}

Socket accept_tcp(const Socket& listener, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) throw Error("no connection within " + std::to_string(int(timeout_s)) + " s");
    pollfd p{listener.fd(), POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (rc < 0 && errno != EINTR) throw Error("poll: " + errno_text());
    if (rc <= 0) continue;
    Socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!s.valid()) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      throw Error("accept: " + errno_text());
    }
    no_delay(s.fd());
    return s;
  }
}

Socket connect_tcp(const std::string& addr, int port, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string why;
  for (;;) {
    AddrList addrs(addr, port, false);
    for (addrinfo* a = addrs.list; a; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.valid()) continue;
      if (::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0) {
        no_delay(s.fd());
        return s;
      }
      why = errno_text();
    }
    if (std::chrono::steady_clock::now() >= deadline)
      throw Error("cannot connect to " + addr + ":" + std::to_string(port) + " within " +
                  std::to_string(int(timeout_s)) + " s: " + why);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void send_message(Socket& s, uint32_t tag, std::string_view payload) {
  char head[12];
  const uint64_t n = payload.size();
  std::memcpy(head, &tag, 4);
  std::memcpy(head + 4, &n, 8);
  s.send_all(head, sizeof head);
  s.send_all(payload.data(), payload.size());
}

Message recv_message(Socket& s, uint64_t max_bytes) {
  char head[12];
  s.recv_all(head, sizeof head);
  Message m;
  uint64_t n;
  std::memcpy(&m.tag, head, 4);
  std::memcpy(&n, head + 4, 8);
  if (n > max_bytes)
    throw Error("a message of " + std::to_string(n) + " bytes (at most " +
                std::to_string(max_bytes) + "): not a vllm-cpp peer");
  m.payload.resize(n);
  s.recv_all(m.payload.data(), n);
  return m;
}

}  // namespace vllm::net
