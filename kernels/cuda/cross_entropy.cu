// Softmax cross-entropy and target log-probabilities over a chunk of logits
// (CUDA), the math of kernels/cpu/cross_entropy.h. For row r with logits l
// [V] and target t (-100 ignored): m = max_j l_j, lse = m + log sum_j
// exp(l_j - m), p_j = exp(l_j - lse).
//   fused CE:   row_loss[r] = lse - l_t (double); l <- scale * (p - onehot(t))
//   log-probs:  logprobs[r] = l_t - lse, lse[r] = lse
//   backward:   l <- dlogprobs[r] * (onehot(t) - p)
// Ignored rows are zeroed (loss and outputs 0). One block per row; exps in
// fp32, their sums in double. Logits may be f32 or bf16 (fp32
// math, rounded on store). A target outside [0, V) sets kErrorTarget and
// the row is treated as ignored.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace sbp::cuda {
namespace {

constexpr int kRowThreads = 512;
constexpr int32_t kIgnore = -100;

struct RowStats {
  float m;         // row max
  double log_sum;  // log sum_j exp(l_j - m)
};

// Row max and log-sum-exp of row `r`; every thread gets them.
__device__ RowStats RowSoftmaxStats(Out logits, int64_t base, int64_t v) {
  __shared__ float max_scratch[32];
  __shared__ double sum_scratch[32];
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, Load(logits, base + j));
  m = BlockMax(m, max_scratch);
  double partial = 0.0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) partial += expf(Load(logits, base + j) - m);
  const double sum = BlockSum(partial, sum_scratch);
  return {m, log(sum)};
}

// Returns the row's target, or kIgnore (also for a bad target, flagged).
__device__ int32_t RowTarget(const int32_t* targets, int64_t r, int64_t v, int* error) {
  const int32_t t = targets[r];
  if (t == kIgnore) return kIgnore;
  if (t < 0 || t >= v) {
    if (threadIdx.x == 0) atomicOr(error, kErrorTarget);
    return kIgnore;
  }
  return t;
}

__global__ void CrossEntropyKernel(Out logits, const int32_t* targets, int64_t v, float scale,
                                   double* row_loss, int* error) {
  const int64_t r = blockIdx.x;
  const int64_t base = r * v;
  const int32_t t = RowTarget(targets, r, v, error);
  if (t == kIgnore) {
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) Store(logits, base + j, 0.0f);
    if (threadIdx.x == 0) row_loss[r] = 0.0;
    return;
  }
  // Every thread reads l_t before the reductions' barriers, so before any write.
  const float l_t = Load(logits, base + t);
  const RowStats st = RowSoftmaxStats(logits, base, v);
  if (threadIdx.x == 0) row_loss[r] = st.log_sum - static_cast<double>(l_t - st.m);
  const float log_sum_f = static_cast<float>(st.log_sum);
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    float g = scale * expf((Load(logits, base + j) - st.m) - log_sum_f);
    if (j == t) g -= scale;
    Store(logits, base + j, g);
  }
}

__global__ void LogProbsForwardKernel(In logits_in, const int32_t* targets, int64_t v,
                                      float* logprobs, float* lse, int* error) {
  const Out logits{const_cast<void*>(logits_in.data), logits_in.type};  // read only
  const int64_t r = blockIdx.x;
  const int32_t t = RowTarget(targets, r, v, error);
  if (t == kIgnore) {
    if (threadIdx.x == 0) {
      logprobs[r] = 0.0f;
      lse[r] = 0.0f;
    }
    return;
  }
  const RowStats st = RowSoftmaxStats(logits, r * v, v);
  if (threadIdx.x == 0) {
    const float l_t = Load(logits, r * v + t);
    logprobs[r] = static_cast<float>(static_cast<double>(l_t - st.m) - st.log_sum);
    lse[r] = static_cast<float>(static_cast<double>(st.m) + st.log_sum);
  }
}

__global__ void LogProbsBackwardKernel(Out logits, const int32_t* targets, int64_t v,
                                       const float* lse, const float* dlogprobs, int* error) {
  const int64_t r = blockIdx.x;
  const int64_t base = r * v;
  const int32_t t = RowTarget(targets, r, v, error);
  const float c = t == kIgnore ? 0.0f : dlogprobs[r];
  const float row_lse = lse[r];
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    if (t == kIgnore) {
      Store(logits, base + j, 0.0f);
      continue;
    }
    float g = -c * expf(Load(logits, base + j) - row_lse);
    if (j == t) g += c;
    Store(logits, base + j, g);
  }
}

}  // namespace

void LaunchCrossEntropy(cudaStream_t stream, Out logits, const int32_t* targets, int64_t rows,
                        int64_t v, float scale, double* row_loss, int* error) {
  if (rows == 0) return;
  CrossEntropyKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      logits, targets, v, scale, row_loss, error);
  CheckLaunch("CrossEntropyKernel", stream);
}

void LaunchLogProbsForward(cudaStream_t stream, In logits, const int32_t* targets, int64_t rows,
                           int64_t v, float* logprobs, float* lse, int* error) {
  if (rows == 0) return;
  LogProbsForwardKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      logits, targets, v, logprobs, lse, error);
  CheckLaunch("LogProbsForwardKernel", stream);
}

void LaunchLogProbsBackward(cudaStream_t stream, Out logits, const int32_t* targets, int64_t rows,
                            int64_t v, const float* lse, const float* dlogprobs, int* error) {
  if (rows == 0) return;
  LogProbsBackwardKernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      logits, targets, v, lse, dlogprobs, error);
  CheckLaunch("LogProbsBackwardKernel", stream);
}

}  // namespace sbp::cuda
