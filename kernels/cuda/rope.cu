// Rotary position embedding, Hugging Face rotate_half (CUDA), in place; the
// math of kernels/cpu/rope.h: row t of x [T, H, d] has position
// p = offset + t, angle = p * inv_freq_i in double with the model's table
// (kernels/rope_table.h), c = m cos(angle), s = m sin(angle) with m the
// attention scaling, rounded to fp32 as on the CPU; with x1 = x[..., :d/2],
// x2 = x[..., d/2:]: forward (x1, x2) <- (x1 c - x2 s, x2 c + x1 s); the
// backward uses -s (the transposed map). One thread per (t, i) pair rotates
// that pair in every head. The table travels by value in the launch. With
// packed documents the position is p - DocumentStart(p) (kernels/documents.h).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/documents.h"

namespace sbp::cuda {
namespace {

__global__ void RopeKernel(Out x, int64_t rows, int64_t heads, int64_t d, int64_t offset,
                           RopeFreqs freqs, RopeDocuments docs, double sign) {
  const int64_t half = d / 2;
  const int64_t pairs = rows * half;
  const double cos_scale = freqs.attention_scaling;
  const double sin_scale = sign * freqs.attention_scaling;
  for (int64_t idx = GlobalThread(); idx < pairs; idx += GridStride()) {
    const int64_t t = idx / half, i = idx % half;
    double sin_d, cos_d;
    const int64_t row = offset + t;
    const int64_t start =
        docs.offsets != nullptr ? DocumentStart(docs.offsets, docs.count, row) : 0;
    sincos(static_cast<double>(row - start) * freqs.inv_freq[i], &sin_d, &cos_d);
    const float c = static_cast<float>(cos_scale * cos_d);
    const float s = static_cast<float>(sin_scale * sin_d);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t i1 = (t * heads + h) * d + i, i2 = i1 + half;
      const float a = Load(x, i1), b = Load(x, i2);
      Store(x, i1, a * c - b * s);
      Store(x, i2, b * c + a * s);
    }
  }
}

}  // namespace

void LaunchRope(cudaStream_t stream, Out x, int64_t rows, int64_t heads, int64_t d,
                int64_t position_offset, const RopeFreqs& freqs, const RopeDocuments& docs,
                bool backward) {
  const int64_t pairs = rows * (d / 2);
  if (pairs == 0 || heads == 0) return;
  RopeKernel<<<GridFor(pairs), kThreads, 0, stream>>>(x, rows, heads, d, position_offset, freqs,
                                                      docs, backward ? -1.0 : 1.0);
  CheckLaunch("RopeKernel", stream);
}

}  // namespace sbp::cuda
