#include "worker/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace sbp {

double LearningRate(const TrainSpec& train, int64_t step) {
  const double lr = train.lr;
  if (train.warmup_steps > 0 && step <= train.warmup_steps) {
    return lr * static_cast<double>(step) / static_cast<double>(train.warmup_steps);
  }
  const int64_t decay_steps = train.steps - train.warmup_steps;
  const double p =
      decay_steps <= 0
          ? 1.0
          : std::clamp(static_cast<double>(step - train.warmup_steps) / decay_steps, 0.0, 1.0);
  const double r = train.min_lr_ratio;
  switch (train.schedule) {
    case LrSchedule::kConstant:
      return lr;
    case LrSchedule::kLinear:
      return lr * (r + (1.0 - r) * (1.0 - p));
    case LrSchedule::kCosine:
      return lr * (r + (1.0 - r) * 0.5 * (1.0 + std::cos(M_PI * p)));
  }
  return lr;
}

}  // namespace sbp
