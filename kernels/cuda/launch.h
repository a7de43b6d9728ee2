// Raw launchers of the CUDA kernels, one section per op file (.cu). They take
// device pointers and sizes that the caller (CudaBackend, which checks
// shapes, dtypes and devices) has validated, enqueue on `stream` and check
// the launch (cuda_check.h). Sizes of zero launch nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/kernel_args.h"
#include "kernels/cuda_scratch_sizes.h"  // ColumnGroups, SumSquaresBlocks

namespace sbp::cuda {

// ---- elementwise.cu -------------------------------------------------------
void LaunchAdd(cudaStream_t stream, In a, In b, Out out, int64_t n);
void LaunchAxpy(cudaStream_t stream, float alpha, In x, Out y, int64_t n);
void LaunchScale(cudaStream_t stream, Out x, float s, int64_t n);
void LaunchFill(cudaStream_t stream, Out x, float value, int64_t n);
void LaunchFillInt(cudaStream_t stream, int32_t* x, int32_t value, int64_t n);
void LaunchCast(cudaStream_t stream, In src, Out dst, int64_t n);
// y [rows, cols] += bias [cols].
void LaunchAddBias(cudaStream_t stream, Out y, In bias, int64_t rows, int64_t cols);
// partials [groups, cols] = column sums of x [rows, cols] over `groups` equal
// row ranges.
void LaunchColumnSums(cudaStream_t stream, In x, int64_t rows, int64_t cols, int groups,
                      float* partials);
// target [cols] += sum over g of partials [g, cols] (double, g in order).
void LaunchAddPartials(cudaStream_t stream, const float* partials, int groups, int64_t cols,
                       Out target);
// *result = sum of x^2 in double: `blocks` partials (scratch), added in order.
void LaunchSumSquares(cudaStream_t stream, In x, int64_t n, int blocks, double* partials,
                      double* result);
// *result = values[0] + values[1] + ... in order.
void LaunchSumInOrder(cudaStream_t stream, const double* values, int64_t count, double* result);

// ---- embedding.cu -----------------------------------------------------------
void LaunchEmbeddingForward(cudaStream_t stream, In table, const int32_t* ids, int64_t tokens,
                            int64_t vocab, int64_t hidden, Out out, int* error);
// Scratch bytes of LaunchEmbeddingBackward for `tokens` ids (at most
// EmbeddingBackwardScratchBound(tokens), cuda_scratch_sizes.h); the launch
// takes the scratch with its size (at least this).
size_t EmbeddingBackwardScratchBytes(int64_t tokens);
void LaunchEmbeddingBackward(cudaStream_t stream, const int32_t* ids, In dout, int64_t tokens,
                             int64_t vocab, int64_t hidden, float* dtable, int* error,
                             void* scratch, size_t scratch_bytes);

// ---- rms_norm.cu --------------------------------------------------------------
// rstd may be null.
void LaunchRmsNormForward(cudaStream_t stream, In x, In w, int64_t rows, int64_t d, float eps,
                          Out y, float* rstd);
// partials: scratch of ColumnGroups(rows, d) * d floats.
void LaunchRmsNormBackward(cudaStream_t stream, In x, In w, const float* rstd, In dy, int64_t rows,
                           int64_t d, int groups, float* partials, Out dx, Out dweight);

// ---- rope.cu -------------------------------------------------------------------
// d = 2 * pairs with pairs <= kMaxRopePairs; freqs holds the first d/2 entries.
// With documents, row t's position is p - DocumentStart(p), p = position_offset + t.
void LaunchRope(cudaStream_t stream, Out x, int64_t rows, int64_t heads, int64_t d,
                int64_t position_offset, const RopeFreqs& freqs, const RopeDocuments& docs,
                bool backward);

// ---- swiglu.cu -----------------------------------------------------------------
void LaunchSwigluForward(cudaStream_t stream, In gate, In up, Out out, int64_t n);
void LaunchSwigluBackward(cudaStream_t stream, In gate, In up, In dout, Out dgate, Out dup,
                          int64_t n);

// ---- cross_entropy.cu --------------------------------------------------------
// row_loss: [rows] doubles (scratch).
void LaunchCrossEntropy(cudaStream_t stream, Out logits, const int32_t* targets, int64_t rows,
                        int64_t v, float scale, double* row_loss, int* error);
void LaunchLogProbsForward(cudaStream_t stream, In logits, const int32_t* targets, int64_t rows,
                           int64_t v, float* logprobs, float* lse, int* error);
void LaunchLogProbsBackward(cudaStream_t stream, Out logits, const int32_t* targets, int64_t rows,
                            int64_t v, const float* lse, const float* dlogprobs, int* error);

// ---- adamw.cu -------------------------------------------------------------------
struct AdamWScalars {
  float b1, b2, one_minus_b1, one_minus_b2, eps, decay, step_size, bias_correction2_sqrt,
      grad_scale;
};
void LaunchAdamW(cudaStream_t stream, float* param, In grad, float* m, float* v, int64_t n,
                 const AdamWScalars& scalars);

// ---- attention.cu (generic: any head dim up to 256, f32 or bf16) -------------
inline constexpr int64_t kGenericMaxHeadDim = 256;
void LaunchAttentionForwardGeneric(cudaStream_t stream, const AttentionArgs& a, Out out,
                                   float* lse);
// delta [rows] = rowwise dot of dout and out, both [rows, d].
void LaunchAttentionDelta(cudaStream_t stream, In dout, In out, int64_t rows, int64_t d,
                          float* delta);
// dq written; dk, dv accumulated.
void LaunchAttentionBackwardGeneric(cudaStream_t stream, const AttentionArgs& a, In dout,
                                    const float* lse, const float* delta, Out dq, Out dk, Out dv);

// ---- attention_flash.cu (tensor cores: bf16 q/k/v/dout, head dim 64 or 128) ---
// Return false (launching nothing) when the head dim or the device's shared
// memory does not fit these kernels; the caller then uses the generic ones.
bool LaunchAttentionForwardFlash(cudaStream_t stream, const AttentionArgs& a, Out out, float* lse);
bool LaunchAttentionBackwardFlash(cudaStream_t stream, const AttentionArgs& a, const void* dout,
                                  const float* lse, const float* delta, Out dq, Out dk, Out dv);
// Blocks of the dk/dv backward kernel per SM of the current device
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor at its launch's block size and
// dynamic shared memory); 0 for another head dim or when it does not fit.
int FlashBackwardDkDvBlocksPerSm(int head_dim);

}  // namespace sbp::cuda
