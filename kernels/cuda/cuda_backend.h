// CUDA backend: the ops of kernels/backend.h on one GPU, matching the CPU
// backend (the reference) op by op. Storage is f32 or bf16 per tensor,
// arithmetic fp32 (sums that decide a scalar in double). Kernels live one op
// per file under kernels/cuda/ (*.cu, launchers in launch.h); matmuls go
// through cuBLAS (bf16 or f32 operands, fp32 accumulation, CUBLAS_COMPUTE_32F,
// no TF32) with a workspace from the allocator; attention uses tensor-core
// kernels for bf16 head_dim 64/128 and generic kernels otherwise.
//
// Every op is queued on the allocator's stream and returns at once, except
// those that hand a value to the host (CrossEntropyForwardBackward,
// SumSquares), Copy and Synchronize, which wait. Bad token ids or targets
// found on the device are reported (CHECK) at the next of those waits.
//
// Dtype rules beyond the CPU backend's (which is f32 only):
//   * rstd, lse, logprobs, dlogprobs are f32; ids and targets i32;
//   * parameter gradients (dweight, dtable, dbias) and AdamW state are f32;
//     activations, weights and activation gradients may be f32 or bf16;
//   * a matmul with any bf16 operand rounds its f32 operands to bf16 first
//     (scratch from the allocator) and computes bf16 x bf16 -> f32/bf16.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/cuda_transfer.h"

namespace sbp {
namespace cuda {
struct CublasLibrary;  // kernels/cuda/cublas_library.h
// The attention and RoPE kernels' shape limits (CudaBackend::CheckAttentionShape).
absl::Status CheckAttentionShapeLimits(int64_t head_dim, int64_t query_heads);
}  // namespace cuda

struct CudaBackendOptions {
  DType activation_dtype = DType::kBF16;  // what activation_dtype() reports
  size_t cublas_workspace_bytes = size_t{32} << 20;
};

class CudaBackend final : public Backend {
 public:
  // `allocator` must outlive the backend (and every tensor it allocates).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(CudaAllocator& allocator,
                                                             CudaBackendOptions options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return allocator_.device(); }
  Allocator& allocator() override { return allocator_; }
  DType activation_dtype() const override { return options_.activation_dtype; }
  void Copy(const Tensor& src, Tensor& dst) override;
  void CopyColumnBlocks(const Tensor& rows, const Tensor& blocks,
                        const std::vector<int64_t>& column_offsets, int64_t width,
                        int64_t offset_in_block, bool to_blocks) override;
  void Synchronize() override;
  Allocator& host_allocator() override { return pinned_; }
  std::unique_ptr<TransferQueue> NewTransferQueue() override;

  void EmbeddingForward(const Tensor& table, const Tensor& ids, Tensor& out) override;
  void EmbeddingBackward(const Tensor& ids, const Tensor& dout, Tensor& dtable) override;

  void RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                      Tensor* rstd) override;
  void RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                       Tensor& dx, Tensor& dweight) override;

  void RopeForward(Tensor& x, int64_t position_offset, const RopeTable& rope,
                   const Tensor* doc_offsets = nullptr) override;
  void RopeBackward(Tensor& dx, int64_t position_offset, const RopeTable& rope,
                    const Tensor* doc_offsets = nullptr) override;

  void MatmulXWt(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) override;
  void MatmulDyW(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate) override;
  void MatmulAccumDyTX(const Tensor& dy, const Tensor& x, Tensor& dw) override;
  void AddBias(Tensor& y, const Tensor& bias) override;
  void BiasBackward(const Tensor& dy, Tensor& dbias) override;

  void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_offset,
                        float scale, Tensor& out, Tensor* lse,
                        const Tensor* doc_offsets = nullptr) override;
  void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& dout, const Tensor& lse, int64_t q_offset, float scale,
                         Tensor& dq, Tensor& dk, Tensor& dv,
                         const Tensor* doc_offsets = nullptr) override;

  void SwigluForward(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate,
                      Tensor& dup) override;

  double CrossEntropyForwardBackward(Tensor& logits, const Tensor& targets, float scale) override;
  void LogProbsForward(const Tensor& logits, const Tensor& targets, Tensor& logprobs,
                       Tensor& lse) override;
  void LogProbsBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                        const Tensor& dlogprobs) override;

  void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
             const AdamWParams& params) override;
  double SumSquares(const Tensor& x) override;

  void Add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void Axpy(float alpha, const Tensor& x, Tensor& y) override;
  void Scale(Tensor& x, float s) override;
  void Fill(Tensor& x, float value) override;
  void Cast(const Tensor& src, Tensor& dst) override;

  cudaStream_t stream() const { return allocator_.stream(); }
  void* native_stream() const override { return stream(); }
  absl::Status CheckAttentionShape(int64_t head_dim, int64_t query_heads) const override;
  absl::Status TakeDeferredError() override;

 private:
  CudaBackend(CudaAllocator& allocator, CudaBackendOptions options)
      : allocator_(allocator), options_(options) {}

  // Makes this backend's GPU current for the calling thread.
  void Bind() const;
  // Makes the GPU current; false (the op must return at once, doing
  // nothing) while an earlier op's failure waits in TakeDeferredError.
  bool Begin() const;
  // Scratch from the allocator (O(chunk), freed when the op returns; the
  // planner counts the largest as `kernel_scratch`). When it cannot be had,
  // the failure is kept for TakeDeferredError and nullopt returned: the op
  // returns without doing anything.
  std::optional<Tensor> Scratch(Shape shape, DType dtype, const char* what, const char* op);
  // Waits for the stream, then CHECK-fails on a device error word.
  void SyncAndCheck(const char* op);
  // Reads a double that an earlier kernel wrote to device memory.
  double ReadScalar(const double* device_value, const char* op);
  // op(a) . op(b) in cuBLAS's column-major terms; see matmul.cc.
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a,
            int64_t lda, const Tensor& b, int64_t ldb, bool accumulate, Tensor& c, int64_t ldc,
            const char* op);

  CudaAllocator& allocator_;
  CudaBackendOptions options_;
  PinnedHostAllocator pinned_;                       // the memory tiers' host memory
  const cuda::CublasLibrary* cublas_api_ = nullptr;  // loaded by Create
  cublasHandle_t cublas_ = nullptr;
  std::shared_ptr<Buffer> workspace_;  // cuBLAS workspace
  int* error_word_ = nullptr;          // device
  int* error_host_ = nullptr;          // pinned host
  double* scalar_host_ = nullptr;      // pinned host
  absl::Status deferred_;              // see TakeDeferredError
};

}  // namespace sbp
