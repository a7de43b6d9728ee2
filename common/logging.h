// A small leveled logger: LOG(INFO) << "text";  Lines go to stderr as
// "I 15:04:05.123 file.cc:42] text", and to the calling thread's LogSink if
// any. The threshold comes from SBP_LOG_LEVEL (debug|info|warning|error,
// default info) or SetLogLevel().
#pragma once

#include <sstream>
#include <string>

namespace sbp {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

// Receives a copy of each line logged on the threads it is attached to (the
// line as printed, without the newline), after it went to stderr. Send must
// not log and must not block for long.
class LogSink {
 public:
  virtual ~LogSink() = default;
  virtual void Send(LogLevel level, const std::string& line) = 0;
};

// Attaches `sink` to the calling thread while in scope (the one attached
// before comes back after): a worker captures one job's lines this way, and
// the lines of other threads (another job's, the heartbeats') stay out.
class ScopedLogSink {
 public:
  explicit ScopedLogSink(LogSink* sink);
  ~ScopedLogSink();
  ScopedLogSink(const ScopedLogSink&) = delete;
  ScopedLogSink& operator=(const ScopedLogSink&) = delete;

 private:
  LogSink* previous_;
};

namespace internal {

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace sbp

#define SBP_LOG_LEVEL_DEBUG ::sbp::LogLevel::kDebug
#define SBP_LOG_LEVEL_INFO ::sbp::LogLevel::kInfo
#define SBP_LOG_LEVEL_WARNING ::sbp::LogLevel::kWarning
#define SBP_LOG_LEVEL_ERROR ::sbp::LogLevel::kError

#define LOG(severity)                               \
  (SBP_LOG_LEVEL_##severity < ::sbp::GetLogLevel()) \
      ? (void)0                                     \
      : ::sbp::internal::LogVoidify() &             \
            ::sbp::internal::LogMessage(SBP_LOG_LEVEL_##severity, __FILE__, __LINE__).stream()
