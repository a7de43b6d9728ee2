#include "client/metrics_client.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/agent/backoff.h"

namespace sbp::cli {
namespace {

namespace v1 = streambp::v1;
using Clock = std::chrono::steady_clock;

constexpr auto kGiveUpAfter = std::chrono::seconds(120);

bool Retryable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded ||
         status.code() == absl::StatusCode::kInternal ||
         status.code() == absl::StatusCode::kUnknown;
}

int64_t StepOf(const std::string& line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return 0;
  auto step = j.find("step");
  return step != j.end() && step->is_number_integer() ? step->get<int64_t>() : 0;
}

}  // namespace

absl::Status ReadJobOutput(CoordinatorClient& client, CoordinatorClient::Output kind,
                           const std::string& id, const OutputReadOptions& options,
                           const std::function<void(const v1::JobOutputLine&)>& on_line,
                           OutputKept* kept) {
  v1::JobOutputRequest request;
  request.set_id(id);
  request.set_attempt(options.attempt);
  request.set_from_step(options.from_step);
  request.set_follow(options.follow);
  Backoff backoff;
  Clock::time_point progress = Clock::now();
  bool opened = false;  // a coordinator that never answered is an error at once
  while (true) {
    absl::Status status = client.StreamOutput(kind, request, [&](const v1::JobOutputChunk& chunk) {
      for (const v1::JobOutputLine& line : chunk.lines()) {
        on_line(line);
        request.set_after_cursor(line.cursor());
      }
      if (kept != nullptr) {
        kept->summaries.assign(chunk.summaries().begin(), chunk.summaries().end());
        kept->max_lines = chunk.max_lines();
        kept->max_bytes = chunk.max_bytes();
      }
      progress = Clock::now();
      opened = true;
      backoff.Reset();
      return true;
    });
    if (status.ok() || !opened || !Retryable(status) || Clock::now() - progress > kGiveUpAfter) {
      return status;
    }
    std::this_thread::sleep_for(backoff.Next());  // then read on after the last line
  }
}

std::vector<std::string> MetricsCurve(const std::vector<std::pair<int, std::string>>& lines) {
  std::vector<std::pair<int64_t, std::string>> curve;  // (step, line)
  int attempt = 0;
  for (const auto& [line_attempt, text] : lines) {
    if (line_attempt < attempt) continue;  // a superseded attempt's straggler
    const int64_t step = StepOf(text);
    if (line_attempt > attempt) {
      attempt = line_attempt;
      while (!curve.empty() && curve.back().first >= step) curve.pop_back();
    }
    curve.emplace_back(step, text);
  }
  std::vector<std::string> out;
  out.reserve(curve.size());
  for (auto& [step, text] : curve) out.push_back(std::move(text));
  return out;
}

absl::StatusOr<std::vector<std::string>> FetchMetricsLines(CoordinatorClient& client,
                                                           const std::string& id, int attempt) {
  std::vector<std::pair<int, std::string>> lines;
  OutputReadOptions options;
  options.attempt = attempt;
  RETURN_IF_ERROR(ReadJobOutput(
      client, CoordinatorClient::Output::kMetrics, id, options,
      [&](const v1::JobOutputLine& line) { lines.emplace_back(line.attempt(), line.text()); }));
  if (attempt == 0) return MetricsCurve(lines);
  std::vector<std::string> out;
  out.reserve(lines.size());
  for (auto& [line_attempt, text] : lines) out.push_back(std::move(text));
  return out;
}

absl::StatusOr<std::vector<std::string>> FetchMetricsLines(const GlobalOptions& global,
                                                           const std::string& id, int attempt) {
  ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client, CoordinatorClient::Connect(global));
  return FetchMetricsLines(*client, id, attempt);
}

plot::JobMetricsSource CoordinatorMetricsSource(const GlobalOptions* global) {
  return [global](const std::string& id) -> absl::StatusOr<plot::MetricsLines> {
    ASSIGN_OR_RETURN(std::vector<std::string> lines, FetchMetricsLines(*global, id));
    if (lines.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " has no metrics lines at the coordinator yet"));
    }
    return plot::MetricsLines{id, absl::StrCat("job ", id, "'s metrics"), std::move(lines)};
  };
}

}  // namespace sbp::cli
