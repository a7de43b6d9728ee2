// A backend whose ops do nothing: the engine allocates exactly as with the
// CPU backend (its allocations do not depend on values, and the CPU kernels
// allocate nothing through the allocator), but a step costs no arithmetic
// and large buffers are mapped and never touched. The planner test uses it to
// measure the allocator's peak for shapes too large to compute in a test.
#pragma once

#include "kernels/backend.h"

namespace sbp::testing {

class NullBackend final : public Backend {
 public:
  explicit NullBackend(Allocator& allocator) : allocator_(allocator) {}

  Device device() const override { return Device::Cpu(); }

  // The deferred-error path (Backend::TakeDeferredError): the n-th check
  // (1-based) answers RESOURCE_EXHAUSTED, as after a CUDA op that found no
  // memory for its scratch; 0: never.
  void FailDeferredCheck(int n) { fail_at_check_ = n; }
  int deferred_checks() const { return checks_; }
  absl::Status TakeDeferredError() override {
    ++checks_;
    if (checks_ != fail_at_check_) return absl::OkStatus();
    return absl::ResourceExhaustedError("MatmulDyW: no device memory for its scratch (injected)");
  }
  Allocator& allocator() override { return allocator_; }

  void EmbeddingForward(const Tensor&, const Tensor&, Tensor&) override {}
  void EmbeddingBackward(const Tensor&, const Tensor&, Tensor&) override {}
  void RmsNormForward(const Tensor&, const Tensor&, float, Tensor&, Tensor*) override {}
  void RmsNormBackward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                       Tensor&) override {}
  void RopeForward(Tensor&, int64_t, const RopeTable&, const Tensor*) override {}
  void RopeBackward(Tensor&, int64_t, const RopeTable&, const Tensor*) override {}
  void MatmulXWt(const Tensor&, const Tensor&, Tensor&, bool) override {}
  void MatmulDyW(const Tensor&, const Tensor&, Tensor&, bool) override {}
  void MatmulAccumDyTX(const Tensor&, const Tensor&, Tensor&) override {}
  void AddBias(Tensor&, const Tensor&) override {}
  void BiasBackward(const Tensor&, Tensor&) override {}
  void AttentionForward(const Tensor&, const Tensor&, const Tensor&, int64_t, float, Tensor&,
                        Tensor*, const Tensor*) override {}
  void AttentionBackward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, int64_t, float, Tensor&, Tensor&, Tensor&,
                         const Tensor*) override {}
  void SwigluForward(const Tensor&, const Tensor&, Tensor&) override {}
  void SwigluBackward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) override {}
  double CrossEntropyForwardBackward(Tensor&, const Tensor&, float) override { return 0; }
  void LogProbsForward(const Tensor&, const Tensor&, Tensor&, Tensor&) override {}
  void LogProbsBackward(Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void AdamW(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWParams&) override {}
  double SumSquares(const Tensor&) override { return 0; }
  void Add(const Tensor&, const Tensor&, Tensor&) override {}
  void Axpy(float, const Tensor&, Tensor&) override {}
  void Scale(Tensor&, float) override {}
  void Fill(Tensor&, float) override {}
  void Cast(const Tensor&, Tensor&) override {}

 private:
  Allocator& allocator_;
  int fail_at_check_ = 0;
  int checks_ = 0;
};

}  // namespace sbp::testing
