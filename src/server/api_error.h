// OpenAI-style API errors: the one exception type handlers throw for a client-visible failure,
// turned into {"object": "error", "error": {message, type, param, code}} at the HTTP boundary.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

namespace vllm::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::optional<std::string> param = std::nullopt)
      : std::runtime_error(message), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::optional<std::string>& param() const { return param_; }

 private:
  int status_;
  std::optional<std::string> param_;
};

inline ApiError bad_request(std::string message, std::optional<std::string> param = std::nullopt) {
  return ApiError(400, std::move(message), std::move(param));
}

// vLLM's error type names by status ("BadRequestError", "NotFoundError", ...).
const char* error_type(int status);
nlohmann::ordered_json error_json(int status, const std::string& message,
                                  const std::optional<std::string>& param = std::nullopt);

}  // namespace vllm::server
