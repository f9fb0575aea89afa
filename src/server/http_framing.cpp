#include "server/http_framing.h"

#include <cctype>
#include <cstring>

namespace vllm::server {

std::string framing_error(const std::string& head, const httplib::Request& req) {
  int fields = 0;
  for (size_t pos = head.find('\n'); pos != std::string::npos && pos + 1 < head.size();) {
    const size_t end = head.find('\n', pos + 1);
    std::string line = head.substr(pos + 1, end == std::string::npos ? end : end - pos - 1);
    pos = end;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) break;  // the end of the head
    if (++fields > kMaxHeaderFields)
      return "more than " + std::to_string(kMaxHeaderFields) + " header fields";
    if (line[0] == ' ' || line[0] == '\t') return "obsolete line folding in a header field";
    const size_t colon = line.find(':');
    if (colon == 0 || colon == std::string::npos) return "malformed header field";
    for (char c : line.substr(0, colon))
      if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr("!#$%&'*+-.^_`|~", c))
        return "invalid character in a header field name";
  }
  const size_t lengths = req.get_header_value_count("Content-Length");
  for (size_t i = 1; i < lengths; ++i)
    if (req.get_header_value("Content-Length", i) != req.get_header_value("Content-Length"))
      return "conflicting Content-Length header fields";
  if (lengths > 0 && req.has_header("Transfer-Encoding"))
    return "Content-Length together with Transfer-Encoding";
  if (req.version == "HTTP/1.1" && req.get_header_value_count("Host") != 1)
    return "an HTTP/1.1 request needs exactly one Host header field";
  return "";
}

}  // namespace vllm::server
