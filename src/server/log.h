// Server logging in vLLM's look ("INFO 05-10 14:03:07 [server] message") on stderr, filtered
// by --log-level. Safe from any thread; one line per call.
#pragma once
#include <string>

namespace vllm::server {

enum class LogLevel { kDebug = 0, kInfo, kWarning, kError, kCritical };

// "debug", "info", "warning", "error", "critical" (any case); throws vllm::Error otherwise.
void set_log_level(const std::string& name);
bool log_enabled(LogLevel level);
void log(LogLevel level, const std::string& message);

inline void log_info(const std::string& m) { log(LogLevel::kInfo, m); }
inline void log_warning(const std::string& m) { log(LogLevel::kWarning, m); }
inline void log_error(const std::string& m) { log(LogLevel::kError, m); }

}  // namespace vllm::server
