// Learning rate at an optimizer step: linear warmup from 0 over warmup_steps,
// then constant, linear or cosine decay to lr * min_lr_ratio at total_steps.
//   warmup:  lr * step / warmup                                (step <= warmup)
//   linear:  lr * (r + (1 - r) * (1 - p))
//   cosine:  lr * (r + (1 - r) * 0.5 * (1 + cos(pi * p)))
// with p = (step - warmup) / (total - warmup) in [0, 1], r = min_lr_ratio.
// Steps are 1-based: the first update uses step 1.
#pragma once

#include <cstdint>

#include "worker/train/job_spec.h"

namespace sbp {

double LearningRate(const TrainSpec& train, int64_t step);

}  // namespace sbp
