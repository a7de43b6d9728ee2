// Exponential backoff with a cap and jitter, for reconnecting to the
// coordinator: 0.2 s, 0.4 s, ... up to `max`.
#pragma once

#include <chrono>
#include <random>

namespace sbp {

class Backoff {
 public:
  using Duration = std::chrono::milliseconds;
  explicit Backoff(Duration initial = Duration(200), Duration max = Duration(5000));
  // The next wait (grows by 2x up to the cap, with +-20% jitter).
  Duration Next();
  void Reset() { current_ = Duration(0); }

 private:
  Duration initial_, max_, current_{0};
  std::minstd_rand rng_;
};

}  // namespace sbp
