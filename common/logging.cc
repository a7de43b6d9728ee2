#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

namespace sbp {
namespace {

LogLevel LevelFromEnvironment() {
  const char* env = std::getenv("SBP_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  std::string v(env);
  if (v == "debug") return LogLevel::kDebug;
  if (v == "warning") return LogLevel::kWarning;
  if (v == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& Threshold() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnvironment())};
  return level;
}

thread_local LogSink* t_sink = nullptr;

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

void SetLogLevel(LogLevel level) { Threshold() = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(Threshold().load()); }

ScopedLogSink::ScopedLogSink(LogSink* sink) : previous_(t_sink) { t_sink = sink; }
ScopedLogSink::~ScopedLogSink() { t_sink = previous_; }

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  using Clock = std::chrono::system_clock;
  const auto now = Clock::now();
  const std::time_t seconds = Clock::to_time_t(now);
  const int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm_utc{};
  gmtime_r(&seconds, &tm_utc);
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%02d:%02d:%02d.%03d", tm_utc.tm_hour, tm_utc.tm_min,
                tm_utc.tm_sec, millis);
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  stream_ << kLetters[static_cast<int>(level)] << ' ' << stamp << ' ' << Basename(file) << ':'
          << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    std::fwrite(text.data(), 1, text.size(), stderr);
    if (level_ >= LogLevel::kWarning) std::fflush(stderr);
  }
  if (t_sink != nullptr) t_sink->Send(level_, text.substr(0, text.size() - 1));
}

}  // namespace internal
}  // namespace sbp
