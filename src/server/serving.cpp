#include "server/serving.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "server/api_error.h"

namespace vllm::server {

const char* error_type(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowedError";
    case 413: return "RequestEntityTooLargeError";
    case 503: return "ServiceUnavailableError";
    default: return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

nlohmann::ordered_json error_json(int status, const std::string& message,
                                  const std::optional<std::string>& param) {
  nlohmann::ordered_json err = {{"message", message},
                                {"type", error_type(status)},
                                {"param", param ? nlohmann::ordered_json(*param) : nullptr},
                                {"code", status}};
  return {{"object", "error"}, {"error", std::move(err)}};
}

std::string ServingContext::resolve_model(const std::string& name) const {
  if (name.empty()) return default_model();
  for (const std::string& served : config.served_model_names)
    if (served == name) return name;
  throw ApiError(404, "The model `" + name + "` does not exist.", "model");
}

std::string ServingContext::new_request_id(const char* prefix) {
  // Random per process, counter per request: unique without a lock.
  static const uint64_t salt = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32 | rd()) ^
           static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  const uint64_t n = next_id_.fetch_add(1);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(salt),
                static_cast<unsigned long long>(n * 0x9e3779b97f4a7c15ULL ^ salt));
  return std::string(prefix) + buf;
}

}  // namespace vllm::server
