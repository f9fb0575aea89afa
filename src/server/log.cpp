#include "server/log.h"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <ctime>

#include "util/check.h"

namespace vllm::server {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kCritical: return "CRITICAL";
  }
  return "?";
}

}  // namespace

void set_log_level(const std::string& name) {
  std::string n;
  for (char c : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const char* names[] = {"debug", "info", "warning", "error", "critical"};
  for (int i = 0; i < 5; ++i)
    if (n == names[i]) {
      g_level = i;
      return;
    }
  throw Error("--log-level must be one of debug, info, warning, error, critical; got " + name);
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void log(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%m-%d %H:%M:%S", &tm);
  // One fprintf per line keeps lines from different threads whole.
  std::fprintf(stderr, "%s %s [server] %s\n", level_name(level), stamp, message.c_str());
}

}  // namespace vllm::server
