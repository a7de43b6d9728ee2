// Document boundaries of a packed sequence, cu_seqlens style: an i32 tensor
// offsets [n + 1] with offsets[0] = 0, strictly increasing, offsets[n] the
// sequence length. Row p of the sequence belongs to document i when
// offsets[i] <= p < offsets[i + 1]. The RoPE and attention ops take it as an
// optional argument (null: the whole sequence is one document):
//
//   position of row p      p - DocumentStart(p)        (restarts at 0)
//   keys seen by query p   [DocumentStart(p), p]       (block-diagonal causal)
//
// The offsets live where the op runs (host memory for the CPU backend, the
// device for CUDA). The lookups below are binary searches usable on both.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define SBP_HOST_DEVICE __host__ __device__
#else
#define SBP_HOST_DEVICE
#endif

namespace sbp {

class Tensor;

// The first row of the document holding row p: the largest offsets[i] <= p
// (0 when none is).
SBP_HOST_DEVICE inline int64_t DocumentStart(const int32_t* offsets, int64_t count, int64_t p) {
  int64_t lo = 0, hi = count;  // answer index in [lo, hi): offsets[lo] <= p
  if (count == 0 || offsets[0] > p) return 0;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (offsets[mid] <= p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return offsets[lo];
}

// One past the last row of the document holding row p: the smallest
// offsets[i] > p (`limit` when none is).
SBP_HOST_DEVICE inline int64_t DocumentEnd(const int32_t* offsets, int64_t count, int64_t p,
                                           int64_t limit) {
  int64_t lo = -1, hi = count;  // answer index in (lo, hi]: offsets[hi] > p
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (offsets[mid] > p) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi < count ? offsets[hi] : limit;
}

// Host checks of an offsets tensor that a call reads up to row `rows` - 1:
// i32, one dimension, at least two entries. `values` also checks the
// contents (host memory only): offsets[0] = 0, strictly increasing, the last
// entry at least `rows`.
void CheckDocumentOffsets(const Tensor& offsets, int64_t rows, bool values, const char* op);

}  // namespace sbp
