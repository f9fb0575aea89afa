// The HTTP request head parser (httplib 0.11's, as serve runs it) and our RFC 9112 framing
// checks (server/http_framing.h) over a connection's bytes: up to 8 pipelined requests read
// from memory in the loop of http_server.cpp's Server::serve. Any bytes must give answers that
// start with a status line, or a close, without a sanitizer report.
#include <httplib.h>

#include <algorithm>
#include <cstring>

#include "fuzz_util.h"
#include "server/http_framing.h"

namespace {

// The connection: reads come from the fuzz input in chunks of `chunk` bytes, writes are kept.
class MemoryStream : public httplib::Stream {
 public:
  MemoryStream(std::string_view in, size_t chunk) : in_(in), chunk_(chunk) {}
  bool has_more() const { return pos_ < in_.size(); }
  void record_head() {
    head_.clear();
    recording_ = true;
  }
  std::string take_head() {
    recording_ = false;
    return std::move(head_);
  }
  const std::string& written() const { return out_; }

  bool is_readable() const override { return has_more(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    if (!has_more()) return 0;
    const size_t n = std::min({size, chunk_, in_.size() - pos_});
    std::memcpy(ptr, in_.data() + pos_, n);
    if (recording_) {
      if (head_.size() + n > vllm::server::kMaxHeadBytes) return -1;
      head_.append(ptr, n);
    }
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 1;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 2;
  }
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  std::string_view in_;
  size_t chunk_;
  size_t pos_ = 0;
  bool recording_ = false;
  std::string head_, out_;
};

thread_local std::string current_error;

class FuzzServer : public httplib::Server {
 public:
  FuzzServer() {
    set_payload_max_length(1 << 20);
    set_pre_routing_handler([](const httplib::Request&, httplib::Response& res) {
      if (current_error.empty()) return HandlerResponse::Unhandled;
      res.status = 400;
      res.set_content(current_error, "application/json");
      res.set_header("Connection", "close");
      return HandlerResponse::Handled;
    });
    auto echo = [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "application/json");
    };
    Get("/health", echo);
    Post("/v1/completions", echo);
    Post("/v1/chat/completions", echo);
    Get("/v1/models/([^/]+)", echo);
  }
  // Server::serve's loop (src/server/http_server.cpp) over a memory connection.
  void serve(MemoryStream& strm) {
    for (size_t left = 8; left > 0 && strm.has_more(); --left) {
      strm.record_head();
      bool closed = false, head_ok = false;
      const bool ok = process_request(strm, left == 1, closed, [&](httplib::Request& req) {
        current_error = vllm::server::framing_error(strm.take_head(), req);
        head_ok = current_error.empty();
      });
      current_error.clear();
      if (!ok || closed || !head_ok) break;
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FuzzServer server;
  if (size == 0) return 0;
  // Byte 0: how the bytes arrive (1 to 256 per read), as a socket may split them anywhere.
  const size_t chunk = size_t(data[0]) + 1;
  MemoryStream strm(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), chunk);
  server.serve(strm);
  const std::string& out = strm.written();
  if (!out.empty() && out.rfind("HTTP/1.1 ", 0) != 0)
    vllm::fuzz::fail("an answer without a status line: " + out.substr(0, 40));
  return 0;
}
