// Token embedding lookup (CUDA), the math of kernels/cpu/embedding.h:
//   forward:  out[t, :] = table[ids[t], :]
//   backward: dtable[ids[t], :] += dout[t, :]   (f32 dtable; one thread per
//             column adds the tokens in order, as the CPU does, so repeated
//             ids sum in the same order every run and on both backends:
//             resumed runs stay bit-identical. It is latency-bound, about a
//             microsecond per token, once per step.)
// An id outside [0, V) is skipped (its output row is zeroed) and sets
// kErrorTokenId in the error word, which the backend reports at the next
// synchronisation.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace sbp::cuda {
namespace {

__global__ void EmbeddingForwardKernel(In table, const int32_t* ids, int64_t tokens, int64_t vocab,
                                       int64_t hidden, Out out, int* error) {
  const int64_t n = tokens * hidden;
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const int64_t t = i / hidden, c = i % hidden;
    const int32_t id = ids[t];
    if (id < 0 || id >= vocab) {
      if (c == 0) atomicOr(error, kErrorTokenId);
      Store(out, i, 0.0f);
      continue;
    }
    Store(out, i, Load(table, static_cast<int64_t>(id) * hidden + c));
  }
}

// Thread c owns column c of dtable: no two threads touch the same element.
__global__ void EmbeddingBackwardKernel(const int32_t* ids, In dout, int64_t tokens, int64_t vocab,
                                        int64_t hidden, float* dtable, int* error) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= hidden) return;
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t id = ids[t];
    if (id < 0 || id >= vocab) {
      if (c == 0) atomicOr(error, kErrorTokenId);
      continue;
    }
    dtable[static_cast<int64_t>(id) * hidden + c] += Load(dout, t * hidden + c);
  }
}

}  // namespace

void LaunchEmbeddingForward(cudaStream_t stream, In table, const int32_t* ids, int64_t tokens,
                            int64_t vocab, int64_t hidden, Out out, int* error) {
  if (tokens * hidden == 0) return;
  EmbeddingForwardKernel<<<GridFor(tokens * hidden), kThreads, 0, stream>>>(
      table, ids, tokens, vocab, hidden, out, error);
  CheckLaunch("EmbeddingForwardKernel", stream);
}

void LaunchEmbeddingBackward(cudaStream_t stream, const int32_t* ids, In dout, int64_t tokens,
                             int64_t vocab, int64_t hidden, float* dtable, int* error) {
  if (tokens * hidden == 0) return;
  const unsigned blocks = static_cast<unsigned>((hidden + kThreads - 1) / kThreads);
  EmbeddingBackwardKernel<<<blocks, kThreads, 0, stream>>>(ids, dout, tokens, vocab, hidden,
                                                           dtable, error);
  CheckLaunch("EmbeddingBackwardKernel", stream);
}

}  // namespace sbp::cuda
