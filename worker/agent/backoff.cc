#include "worker/agent/backoff.h"

#include <algorithm>

namespace sbp {

Backoff::Backoff(Duration initial, Duration max)
    : initial_(initial), max_(max), rng_(std::random_device{}()) {}

Backoff::Duration Backoff::Next() {
  current_ = current_.count() == 0 ? initial_ : std::min(max_, current_ * 2);
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  return Duration(static_cast<int64_t>(static_cast<double>(current_.count()) * jitter(rng_)));
}

}  // namespace sbp
