#include "client/progress.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "common/byte_size.h"

namespace sbp::cli {

std::string FormatDuration(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "?";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  const int64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  return h > 0 ? absl::StrFormat("%d:%02d:%02d", h, m, s) : absl::StrFormat("%d:%02d", m, s);
}

namespace {

std::string Rate(double per_second) {
  if (per_second >= 1e6) return absl::StrFormat("%.1fM", per_second / 1e6);
  if (per_second >= 1e3) return absl::StrFormat("%.1fk", per_second / 1e3);
  return absl::StrFormat("%.0f", per_second);
}

}  // namespace

std::string ProgressLine(const ProgressSample& p, int width) {
  const double fraction =
      p.total_steps > 0 ? std::min(1.0, static_cast<double>(p.step) / p.total_steps) : 0.0;
  const int filled = static_cast<int>(fraction * width);
  std::string bar(static_cast<size_t>(width) + 2, '-');
  bar.front() = '[';
  bar.back() = ']';
  for (int i = 0; i < filled; ++i) bar[1 + i] = '#';
  const std::string eval =
      p.eval_step > 0 ? absl::StrFormat("  eval %.4f @%d", p.eval_loss, p.eval_step) : "";
  const std::string rollout =
      p.rollout.has_value()
          ? absl::StrFormat("  reward %.2f\u00b1%.2f  len %.0f/%d  trunc %.0f%%",
                            p.rollout->reward_mean, p.rollout->reward_std,
                            p.rollout->completion_length_mean, p.rollout->completion_length_max,
                            p.rollout->truncated_fraction * 100)
          : "";
  return absl::StrFormat("%s %*d/%d  loss %.4f%s%s  %s tok/s  peak %s  ETA %s", bar,
                         static_cast<int>(std::to_string(p.total_steps).size()), p.step,
                         p.total_steps, p.loss, eval, rollout, Rate(p.tokens_per_second),
                         FormatByteSize(p.peak_bytes), FormatDuration(p.eta_seconds));
}

ProgressPrinter::ProgressPrinter(std::FILE* out, bool interactive, int64_t every)
    : out_(out), interactive_(interactive), every_(every > 0 ? every : 1) {}

void ProgressPrinter::Update(const ProgressSample& sample) {
  if (last_printed_step_ < 0) last_printed_step_ = sample.step - 1;
  if (interactive_) {
    std::fprintf(out_, "\r%s\033[K", ProgressLine(sample).c_str());
    open_line_ = true;
  } else if (sample.step / every_ > last_printed_step_ / every_ ||
             (sample.step == sample.total_steps && sample.step != last_printed_step_)) {
    std::fprintf(out_, "%s\n", ProgressLine(sample).c_str());
    last_printed_step_ = sample.step;
  }
  std::fflush(out_);
}

void ProgressPrinter::Finish() {
  if (open_line_) std::fprintf(out_, "\n");
  open_line_ = false;
  std::fflush(out_);
}

}  // namespace sbp::cli
