// CudaBackend attention: the CPU backend's argument checks, then the
// tensor-core kernels (attention_flash.cu) when q, k, v (and dout) are bf16
// with head_dim 64 or 128 and 16-byte aligned, the generic kernels
// (attention.cu) otherwise. The backward computes delta = rowsum(dout * out)
// into an f32 scratch of the size of lse first. Packed documents travel as
// device offsets (kernels/documents.h) in the kernels' arguments.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernel_args.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_args.h"
#include "kernels/documents.h"

namespace sbp {
namespace {

cuda::AttentionArgs CheckInputs(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_offset,
                                float scale, Device device) {
  cuda::CheckFloat(q, device, "q");
  cuda::CheckFloat(k, device, "k");
  cuda::CheckFloat(v, device, "v");
  CHECK_EQ(q.rank(), 3) << "attention: q must be [Tq, Hq, d], got " << q.DebugString();
  CHECK_EQ(k.rank(), 3) << "attention: k must be [Tk, Hkv, d], got " << k.DebugString();
  CHECK(v.shape() == k.shape()) << "attention: v " << v.DebugString() << " must match k "
                                << k.DebugString();
  cuda::AttentionArgs a;
  a.q = q.raw_data();
  a.k = k.raw_data();
  a.v = v.raw_data();
  a.q_type = cuda::ToElemType(q.dtype());
  a.k_type = cuda::ToElemType(k.dtype());
  a.v_type = cuda::ToElemType(v.dtype());
  a.tq = q.dim(0);
  a.tk = k.dim(0);
  a.hq = q.dim(1);
  a.hkv = k.dim(1);
  a.d = q.dim(2);
  a.q_offset = q_offset;
  a.scale = scale;
  CHECK_EQ(k.dim(2), a.d) << "attention: head_dim of q " << q.DebugString() << " and k "
                          << k.DebugString() << " differ";
  CHECK(a.hkv > 0 && a.hq % a.hkv == 0)
      << "attention: query heads of q " << q.DebugString()
      << " must be a multiple of the KV heads of k " << k.DebugString();
  CHECK(a.d > 0 && a.d <= cuda::kGenericMaxHeadDim)
      << "attention: head_dim " << a.d << " outside [1, " << cuda::kGenericMaxHeadDim << "]";
  CHECK_GE(q_offset, 0) << "attention: negative q_offset";
  CHECK_GE(a.tk, q_offset + a.tq) << "attention: k " << k.DebugString()
                                  << " must hold rows [0, q_offset + Tq) for q " << q.DebugString()
                                  << " at q_offset " << q_offset;
  CHECK_LE(a.hq, 65535) << "attention: too many heads for one grid";
  return a;
}

void SetDocuments(cuda::AttentionArgs& a, const Tensor* doc_offsets, Device device) {
  if (doc_offsets == nullptr) return;
  cuda::CheckDType(*doc_offsets, device, DType::kI32, "attention document offsets");
  CheckDocumentOffsets(*doc_offsets, 0, /*values=*/false, "attention");
  a.doc_offsets = doc_offsets->data<int32_t>();
  a.doc_count = doc_offsets->dim(0);
}

void CheckLike(const Tensor& t, const Tensor& like, Device device, const char* name,
               const char* like_name) {
  cuda::CheckFloat(t, device, name);
  cuda::CheckShape(t, like, name, like_name);
}

void CheckLse(const Tensor& lse, const cuda::AttentionArgs& a, Device device) {
  cuda::CheckDType(lse, device, DType::kF32, "lse");
  CHECK(lse.shape() == (Shape{a.tq, a.hq}))
      << "attention: lse must be [Tq, Hq] = " << ShapeString({a.tq, a.hq}) << ", got "
      << lse.DebugString();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The tensor-core kernels take bf16 inputs with head_dim 64 or 128, loaded in
// 16-byte vectors.
bool FlashEligible(const cuda::AttentionArgs& a, const Tensor* dout) {
  const bool bf16 = a.q_type == cuda::ElemType::kBF16 && a.k_type == cuda::ElemType::kBF16 &&
                    a.v_type == cuda::ElemType::kBF16 &&
                    (dout == nullptr || dout->dtype() == DType::kBF16);
  const bool aligned = Aligned16(a.q) && Aligned16(a.k) && Aligned16(a.v) &&
                       (dout == nullptr || Aligned16(dout->raw_data()));
  return bf16 && aligned && (a.d == 64 || a.d == 128);
}

}  // namespace

absl::Status cuda::CheckAttentionShapeLimits(int64_t head_dim, int64_t query_heads) {
  const int64_t max_head_dim = std::min(cuda::kGenericMaxHeadDim, 2 * cuda::kMaxRopePairs);
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > max_head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", head_dim, ": the CUDA attention and RoPE kernels take an even ",
                     "head_dim of at most ", max_head_dim));
  }
  if (query_heads <= 0 || query_heads > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_attention_heads ", query_heads, ": the CUDA attention kernels take at most 65535"));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::CheckAttentionShape(int64_t head_dim, int64_t query_heads) const {
  return cuda::CheckAttentionShapeLimits(head_dim, query_heads);
}

void CudaBackend::AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   int64_t q_offset, float scale, Tensor& out, Tensor* lse,
                                   const Tensor* doc_offsets) {
  if (!Begin()) return;
  cuda::AttentionArgs a = CheckInputs(q, k, v, q_offset, scale, device());
  SetDocuments(a, doc_offsets, device());
  CheckLike(out, q, device(), "out", "q");
  float* lse_data = nullptr;
  if (lse != nullptr) {
    CheckLse(*lse, a, device());
    lse_data = lse->data<float>();
  }
  if (FlashEligible(a, nullptr) &&
      cuda::LaunchAttentionForwardFlash(stream(), a, cuda::AsOut(out), lse_data)) {
    return;
  }
  cuda::LaunchAttentionForwardGeneric(stream(), a, cuda::AsOut(out), lse_data);
}

void CudaBackend::AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& dout, const Tensor& lse,
                                    int64_t q_offset, float scale, Tensor& dq, Tensor& dk,
                                    Tensor& dv, const Tensor* doc_offsets) {
  if (!Begin()) return;
  cuda::AttentionArgs a = CheckInputs(q, k, v, q_offset, scale, device());
  SetDocuments(a, doc_offsets, device());
  CheckLike(out, q, device(), "out", "q");
  CheckLike(dout, q, device(), "dout", "q");
  CheckLike(dq, q, device(), "dq", "q");
  CheckLike(dk, k, device(), "dk", "k");
  CheckLike(dv, k, device(), "dv", "k");
  CheckLse(lse, a, device());
  if (a.tq == 0) return;
  std::optional<Tensor> scratch =
      Scratch({a.tq, a.hq}, DType::kF32, "attention delta", "AttentionBackward");
  if (!scratch) return;
  Tensor& delta = *scratch;
  cuda::LaunchAttentionDelta(stream(), cuda::AsIn(dout), cuda::AsIn(out), a.tq * a.hq, a.d,
                             delta.data<float>());
  if (FlashEligible(a, &dout) &&
      cuda::LaunchAttentionBackwardFlash(stream(), a, dout.raw_data(), lse.data<float>(),
                                         delta.data<float>(), cuda::AsOut(dq), cuda::AsOut(dk),
                                         cuda::AsOut(dv))) {
    return;
  }
  cuda::LaunchAttentionBackwardGeneric(stream(), a, cuda::AsIn(dout), lse.data<float>(),
                                       delta.data<float>(), cuda::AsOut(dq), cuda::AsOut(dk),
                                       cuda::AsOut(dv));
}

}  // namespace sbp
