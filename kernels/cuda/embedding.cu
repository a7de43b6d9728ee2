// Token embedding lookup (CUDA), the math of kernels/cpu/embedding.h:
//   forward:  out[t, :] = table[ids[t], :]
//   backward: dtable[ids[t], :] += dout[t, :]   (f32 dtable). The ids are
//             sorted once per call, stably (CUB radix sort of (id, t)
//             pairs), and cut into runs of equal ids; block (run, column
//             block) then adds its run's rows into dtable row `id` in token
//             order, as the CPU does. Every element gets its additions in the
//             same order on every run and on both backends (resumed runs stay
//             bit-identical), while all runs and column blocks run in
//             parallel (one thread per column over all tokens was serial
//             in T: 16 blocks for H = 4096).
// An id outside [0, V) is skipped (its output row is zeroed) and sets
// kErrorTokenId in the error word, which the backend reports at the next
// synchronisation.
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

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

__global__ void IotaKernel(int32_t* out, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) out[i] = static_cast<int32_t>(i);
}

// Block (r, y) adds run r (tokens sorted_pos[offsets[r] .. + counts[r]), all
// of id unique_ids[r], in token order) into columns y*blockDim.x + threadIdx.x
// of dtable row id. Runs past *num_runs exit.
__global__ void EmbeddingBackwardRunsKernel(const int32_t* unique_ids, const int32_t* offsets,
                                            const int32_t* counts, const int32_t* num_runs,
                                            const int32_t* sorted_pos, In dout, int64_t vocab,
                                            int64_t hidden, float* dtable, int* error) {
  const int32_t r = static_cast<int32_t>(blockIdx.x);
  if (r >= *num_runs) return;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= hidden) return;
  const int32_t id = unique_ids[r];
  if (id < 0 || id >= vocab) {
    if (c == 0) atomicOr(error, kErrorTokenId);
    return;
  }
  float* element = dtable + static_cast<int64_t>(id) * hidden + c;
  float sum = *element;
  const int32_t begin = offsets[r], end = begin + counts[r];
  for (int32_t j = begin; j < end; ++j) {
    sum += Load(dout, static_cast<int64_t>(sorted_pos[j]) * hidden + c);
  }
  *element = sum;
}

// The scratch of one backward over `tokens` ids: six int32 arrays of
// `tokens` (positions, sorted ids, sorted positions, run ids, run lengths,
// run offsets), the run count, then CUB's temporary storage.
struct EmbeddingScratch {
  int32_t *positions, *sorted_ids, *sorted_pos, *unique_ids, *counts, *offsets, *num_runs;
  void* temp;
  size_t temp_bytes;
};

void CheckCub(cudaError_t status, const char* call) {
  CHECK(status == cudaSuccess) << "EmbeddingBackward: " << call
                               << " failed: " << cudaGetErrorName(status) << " ("
                               << cudaGetErrorString(status) << ")";
}

size_t AlignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t CubTempBytes(int64_t tokens) {
  const int n = static_cast<int>(tokens);
  size_t sort = 0, encode = 0, scan = 0;
  // Size queries only (no work is queued); they fail only without a device.
  CheckCub(cub::DeviceRadixSort::SortPairs(
               nullptr, sort, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
               static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n),
           "cub::DeviceRadixSort::SortPairs (size)");
  CheckCub(cub::DeviceRunLengthEncode::Encode(nullptr, encode, static_cast<const int32_t*>(nullptr),
                                              static_cast<int32_t*>(nullptr),
                                              static_cast<int32_t*>(nullptr),
                                              static_cast<int32_t*>(nullptr), n),
           "cub::DeviceRunLengthEncode::Encode (size)");
  CheckCub(cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<const int32_t*>(nullptr),
                                         static_cast<int32_t*>(nullptr), n),
           "cub::DeviceScan::ExclusiveSum (size)");
  return std::max(sort, std::max(encode, scan));
}

// The arrays ahead of CUB's storage: six of `tokens` int32 and the run count.
size_t ArraysBytes(int64_t tokens) {
  return 6 * AlignUp(static_cast<size_t>(tokens) * sizeof(int32_t)) + 256;
}

// `scratch_bytes` (EmbeddingBackwardScratchBytes, which asked CUB once) split
// into the arrays and CUB's storage: CUB is not asked again per call.
EmbeddingScratch CarveScratch(void* scratch, size_t scratch_bytes, int64_t tokens) {
  CHECK_GE(scratch_bytes, ArraysBytes(tokens)) << "EmbeddingBackward: scratch too small";
  char* p = static_cast<char*>(scratch);
  const size_t array = AlignUp(static_cast<size_t>(tokens) * sizeof(int32_t));
  EmbeddingScratch s;
  int32_t** arrays[] = {&s.positions,  &s.sorted_ids, &s.sorted_pos,
                        &s.unique_ids, &s.counts,     &s.offsets};
  for (int32_t** a : arrays) {
    *a = reinterpret_cast<int32_t*>(p);
    p += array;
  }
  s.num_runs = reinterpret_cast<int32_t*>(p);
  p += 256;
  s.temp = p;
  s.temp_bytes = scratch_bytes - ArraysBytes(tokens);
  return s;
}

}  // namespace

void LaunchEmbeddingForward(cudaStream_t stream, In table, const int32_t* ids, int64_t tokens,
                            int64_t vocab, int64_t hidden, Out out, int* error) {
  if (tokens * hidden == 0) return;
  EmbeddingForwardKernel<<<GridFor(tokens * hidden), kThreads, 0, stream>>>(
      table, ids, tokens, vocab, hidden, out, error);
  CheckLaunch("EmbeddingForwardKernel", stream);
}

size_t EmbeddingBackwardScratchBytes(int64_t tokens) {
  if (tokens <= 0) return 0;
  return ArraysBytes(tokens) + CubTempBytes(tokens);
}

void LaunchEmbeddingBackward(cudaStream_t stream, const int32_t* ids, In dout, int64_t tokens,
                             int64_t vocab, int64_t hidden, float* dtable, int* error,
                             void* scratch, size_t scratch_bytes) {
  if (tokens * hidden == 0) return;
  CHECK_LT(tokens, int64_t{1} << 31) << "EmbeddingBackward: too many tokens for one sort";
  const int n = static_cast<int>(tokens);
  EmbeddingScratch s = CarveScratch(scratch, scratch_bytes, tokens);
  IotaKernel<<<GridFor(tokens), kThreads, 0, stream>>>(s.positions, tokens);
  CheckLaunch("IotaKernel", stream);
  // Radix sort is stable: equal ids keep their positions in token order.
  size_t temp_bytes = s.temp_bytes;
  CheckCub(cub::DeviceRadixSort::SortPairs(s.temp, temp_bytes, ids, s.sorted_ids, s.positions,
                                           s.sorted_pos, n, 0, 32, stream),
           "cub::DeviceRadixSort::SortPairs");
  // Lengths past the run count are not written: zero them first so that the
  // scan reads defined values (the runs kernel never reads past the count).
  CheckCub(cudaMemsetAsync(s.counts, 0, static_cast<size_t>(tokens) * sizeof(int32_t), stream),
           "cudaMemsetAsync");
  temp_bytes = s.temp_bytes;
  CheckCub(cub::DeviceRunLengthEncode::Encode(s.temp, temp_bytes, s.sorted_ids, s.unique_ids,
                                              s.counts, s.num_runs, n, stream),
           "cub::DeviceRunLengthEncode::Encode");
  temp_bytes = s.temp_bytes;
  CheckCub(cub::DeviceScan::ExclusiveSum(s.temp, temp_bytes, s.counts, s.offsets, n, stream),
           "cub::DeviceScan::ExclusiveSum");
  // At most `tokens` runs; blocks past the count exit at once.
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((hidden + kThreads - 1) / kThreads));
  EmbeddingBackwardRunsKernel<<<grid, kThreads, 0, stream>>>(s.unique_ids, s.offsets, s.counts,
                                                             s.num_runs, s.sorted_pos, dout, vocab,
                                                             hidden, dtable, error);
  CheckLaunch("EmbeddingBackwardRunsKernel", stream);
}

}  // namespace sbp::cuda
