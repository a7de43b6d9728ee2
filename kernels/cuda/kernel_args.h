// Plain argument types shared by the CUDA kernels (.cu, compiled as CUDA
// C++17) and the host code that launches them (.cc, C++20 with Tensor).
// Kernels see raw device pointers with a run-time element type: one kernel
// serves f32 and bf16 storage (it loads into fp32 registers and rounds on
// store), which keeps the number of template instantiations small.
#pragma once

#include <cstdint>

namespace sbp::cuda {

enum class ElemType : int32_t { kF32 = 0, kBF16 = 1, kI32 = 2 };

// Read-only float array stored as f32 or bf16.
struct In {
  const void* data = nullptr;
  ElemType type = ElemType::kF32;
};

// Writable float array stored as f32 or bf16.
struct Out {
  void* data = nullptr;
  ElemType type = ElemType::kF32;
};

// Bits of the device error word: a kernel that meets a bad index skips it and
// sets a bit; the backend reports the bits at the next synchronisation.
inline constexpr int kErrorTokenId = 1;  // an embedding id outside [0, V)
inline constexpr int kErrorTarget = 2;   // a target outside [0, V) and not -100

// The rotary table passed by value as a kernel argument (1 KiB of the 4 KiB
// a launch may carry): inv_freq of the d/2 pairs and the cos/sin scaling.
inline constexpr int64_t kMaxRopePairs = 128;  // head_dim up to 256
struct RopeFreqs {
  double inv_freq[kMaxRopePairs];
  double attention_scaling;
};

// Packed documents of a RoPE call (kernels/documents.h): offsets i32 [count]
// on the device, or null for one document.
struct RopeDocuments {
  const int32_t* offsets = nullptr;
  int64_t count = 0;
};

// Causal GQA attention (see kernels/backend.h): q, out, dout, dq [tq, hq, d];
// k, v, dk, dv [tk, hkv, d]; lse, delta [tq, hq] f32. Query row i has
// sequence position q_offset + i and sees keys j <= q_offset + i; with packed
// documents (doc_offsets non-null: i32 [doc_count] cu_seqlens on the device,
// kernels/documents.h) only those from DocumentStart(q_offset + i) on.
struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  ElemType q_type = ElemType::kF32, k_type = ElemType::kF32, v_type = ElemType::kF32;
  int64_t tq = 0, tk = 0, hq = 0, hkv = 0, d = 0, q_offset = 0;
  float scale = 1.0f;
  const int32_t* doc_offsets = nullptr;
  int64_t doc_count = 0;
};

}  // namespace sbp::cuda
