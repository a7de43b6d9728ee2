// Progress display of a training run: a one-line bar redrawn in place on a
// terminal (step/total, loss, tokens/s, peak memory, ETA), plain log lines
// otherwise.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace sbp::cli {

// Online GRPO's sampling in a step (streambp.v1.RolloutProgress).
struct RolloutSample {
  double reward_mean = 0;
  double reward_std = 0;
  double completion_length_mean = 0;  // new tokens per completion
  int64_t completion_length_max = 0;
  double truncated_fraction = 0;  // cut off at max_new_tokens
};

struct ProgressSample {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double tokens_per_second = 0;
  int64_t peak_bytes = 0;
  double eta_seconds = -1;  // < 0: unknown
  int64_t eval_step = 0;    // the latest validation loss's step (0: none)
  double eval_loss = 0;
  std::optional<RolloutSample> rollout;  // jobs that sample online only
};

class ProgressPrinter {
 public:
  // `interactive`: redraw one line (a terminal); otherwise print a line every
  // `every` steps and on the last step (when samples skip steps, as a remote
  // watch may, a line whenever a multiple of `every` was passed).
  ProgressPrinter(std::FILE* out, bool interactive, int64_t every);
  void Update(const ProgressSample& sample);
  // Ends the in-place line (before other output).
  void Finish();

 private:
  std::FILE* out_;
  bool interactive_;
  int64_t every_;
  bool open_line_ = false;
  int64_t last_printed_step_ = -1;  // -1: no sample yet
};

// "1:02:03" / "4:05".
std::string FormatDuration(double seconds);
// The bar line itself (no newline), e.g.
// "[########------------]  40/100  loss 2.3012  1.2k tok/s  peak 1.1 GiB  ETA 0:42",
// with "  eval 2.4107 @40" after the loss once a validation loss exists and
// "  reward 0.42±0.10  len 37/64  trunc 5%" (mean ± standard deviation of the
// rewards, mean/max completion length, the fraction cut off at
// max_new_tokens) after that for jobs that sample online.
std::string ProgressLine(const ProgressSample& sample, int width = 20);

}  // namespace sbp::cli
