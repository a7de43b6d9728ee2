// What the C++ tests against the committed goldens (tests/reference/golden/,
// written by generate_goldens.py and generate_lora_goldens.py) share: where
// a golden lives, reading its JSON, and a TokenLoss that keeps the logits.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "worker/engine/token_loss.h"

namespace sbp::golden {

// tests/reference/golden/<name> under $SBP_SOURCE_DIR (ctest sets it).
inline std::string GoldenDir(const std::string& name) {
  const char* root = std::getenv("SBP_SOURCE_DIR");
  return std::string(root ? root : ".") + "/tests/reference/golden/" + name;
}

inline nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

// Copies the logits of every chunk (forward only) into rows of `out`.
class CaptureLogits final : public TokenLoss {
 public:
  explicit CaptureLogits(Tensor out) : out_(std::move(out)) {}
  double ForwardBackward(Backend&, Tensor&, const Tensor&, int64_t) override {
    ADD_FAILURE() << "forward only";
    return 0;
  }
  double Forward(Backend& backend, Tensor& logits, const Tensor&, int64_t begin) override {
    Tensor rows = out_.Rows(begin, begin + logits.dim(0));
    backend.Cast(logits, rows);
    return 0;
  }

 private:
  Tensor out_;
};

}  // namespace sbp::golden
