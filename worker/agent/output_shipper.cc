#include "worker/agent/output_shipper.h"

#include "absl/strings/str_split.h"
#include "worker/agent/backoff.h"

namespace sbp {
namespace {

// The length of the valid UTF-8 sequence at text[i], 0 when there is none.
size_t Utf8Length(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

// `line` as valid UTF-8 (protobuf strings must be): a byte that starts no
// valid sequence becomes '?'. Cut to `max` bytes, on a character boundary.
std::string Sanitized(const std::string& line, size_t max) {
  std::string out;
  out.reserve(std::min(line.size(), max));
  for (size_t i = 0; i < line.size();) {
    const size_t n = Utf8Length(line, i);
    if (out.size() + std::max<size_t>(n, 1) > max) {
      out += " [cut]";
      break;
    }
    if (n == 0) {
      out.push_back('?');
      ++i;
    } else {
      out.append(line, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace

OutputShipper::OutputShipper(SendFn send) : send_(std::move(send)) {
  thread_ = std::thread([this] { Loop(); });
}

OutputShipper::~OutputShipper() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void OutputShipper::Post(Queue& queue, std::string line) {
  const int64_t number = queue.next++;
  // Dropped (a gap the coordinator counts) when shipping stopped or the
  // coordinator has been away for long.
  if (gave_up_ || queue.lines.size() >= kMaxQueued) return;
  queue.lines.emplace_back(number, std::move(line));
}

void OutputShipper::PostMetrics(std::string line) {
  absl::MutexLock lock(&mu_);
  if (line.size() > kMaxMetricsLineBytes) {
    ++metrics_.next;  // too long to ship: counted as dropped
    return;
  }
  Post(metrics_, std::move(line));
}

void OutputShipper::Send(LogLevel level, const std::string& line) {
  absl::MutexLock lock(&mu_);
  for (absl::string_view part : absl::StrSplit(line, '\n')) {
    Post(logs_, Sanitized(std::string(part), kMaxLineBytes));
  }
}

OutputShipper::Batch OutputShipper::NextBatch() const {
  Batch batch;
  size_t count = 0, bytes = 0;
  const auto take = [&](const Queue& queue, int64_t* first, std::vector<std::string>* out) {
    for (const auto& [number, text] : queue.lines) {
      if (!out->empty() && number != *first + static_cast<int64_t>(out->size())) break;
      if (count >= kMaxBatchLines || (count > 0 && bytes + text.size() > kMaxBatchBytes)) break;
      if (out->empty()) *first = number;
      out->push_back(text);
      ++count;
      bytes += text.size();
    }
  };
  take(metrics_, &batch.metrics_first, &batch.metrics);
  take(logs_, &batch.logs_first, &batch.logs);
  return batch;
}

void OutputShipper::Drop(const Batch& batch) {
  metrics_.lines.erase(metrics_.lines.begin(), metrics_.lines.begin() + batch.metrics.size());
  logs_.lines.erase(logs_.lines.begin(), logs_.lines.begin() + batch.logs.size());
}

bool OutputShipper::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  ++flushing_;
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return gave_up_ || stopping_ || (!HasWork() && !sending_);
  };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  --flushing_;
  return !gave_up_ && !HasWork() && !sending_;
}

void OutputShipper::Loop() {
  Backoff backoff;
  bool warned = false;
  absl::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || (!gave_up_ && HasWork());
    };
    mu_.Await(absl::Condition(&ready));
    if (stopping_) return;
    const Batch batch = NextBatch();
    sending_ = true;
    mu_.Unlock();
    const absl::Status status = send_(batch);
    mu_.Lock();
    sending_ = false;
    absl::Duration pause = kSendInterval;
    switch (status.code()) {
      case absl::StatusCode::kOk:
        Drop(batch);
        backoff.Reset();
        warned = false;
        break;
      case absl::StatusCode::kAborted:
      case absl::StatusCode::kUnimplemented:  // a coordinator older than this worker
      case absl::StatusCode::kPermissionDenied:
      case absl::StatusCode::kUnauthenticated:
        gave_up_ = true;
        metrics_.lines.clear();
        logs_.lines.clear();
        LOG(WARNING) << "job output (sbp logs, sbp metrics) no longer shipped: "
                     << status.message();
        break;
      case absl::StatusCode::kInvalidArgument:
        Drop(batch);
        LOG(WARNING) << "job output batch refused, dropped: " << status.message();
        break;
      default:
        if (!warned) {
          LOG(WARNING) << "job output not shipped (will retry): " << status.message();
          warned = true;
        }
        pause = absl::FromChrono(backoff.Next());
        break;
    }
    // Between calls a pause (a backoff after a failure), cut short by a
    // Flush only after a success.
    const bool failed = !status.ok();
    auto wake = [this, failed]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || gave_up_ || (!failed && flushing_ > 0);
    };
    mu_.AwaitWithTimeout(absl::Condition(&wake), pause);
  }
}

}  // namespace sbp
