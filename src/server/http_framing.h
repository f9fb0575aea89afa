// RFC 9112 framing checks of a request head that httplib reads leniently (some of the shapes
// it accepts are request-smuggling shapes). Pure: the server and tests/fuzz call it.
#pragma once
#include <httplib.h>

#include <cstddef>
#include <string>

namespace vllm::server {

// A request head (request line and header fields) larger than this is refused.
inline constexpr size_t kMaxHeadBytes = 64 * 1024;
inline constexpr int kMaxHeaderFields = 256;

// Why the raw request `head` (as read, up to its empty line) and httplib's parse of it `req`
// break RFC 9112's framing rules; "" when they do not.
std::string framing_error(const std::string& head, const httplib::Request& req);

}  // namespace vllm::server
