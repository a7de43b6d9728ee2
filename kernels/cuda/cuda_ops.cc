// CudaBackend ops other than matmul and attention: argument checks (the CPU
// backend's, plus the dtype rules of cuda_backend.h), then the op's launcher
// (one .cu file per op, declared in launch.h).
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_args.h"
#include "kernels/documents.h"

namespace sbp {

using cuda::AsIn;
using cuda::AsOut;
using cuda::CheckDType;
using cuda::CheckFloat;
using cuda::CheckOn;
using cuda::CheckShape;

// ---- embedding (embedding.cu) ------------------------------------------------

void CudaBackend::EmbeddingForward(const Tensor& table, const Tensor& ids, Tensor& out) {
  if (!Begin()) return;
  CheckFloat(table, device(), "table");
  CheckDType(ids, device(), DType::kI32, "ids");
  CheckFloat(out, device(), "out");
  CHECK_EQ(table.rank(), 2) << "table must be [V, H], got " << table.DebugString();
  const int64_t hidden = table.dim(1);
  CHECK(out.rank() >= 1 && out.dim(-1) == hidden && out.numel() == ids.numel() * hidden)
      << "out " << out.DebugString() << " does not match ids " << ids.DebugString() << " and table "
      << table.DebugString();
  cuda::LaunchEmbeddingForward(stream(), AsIn(table), ids.data<int32_t>(), ids.numel(),
                               table.dim(0), hidden, AsOut(out), error_word_);
}

void CudaBackend::EmbeddingBackward(const Tensor& ids, const Tensor& dout, Tensor& dtable) {
  if (!Begin()) return;
  CheckDType(ids, device(), DType::kI32, "ids");
  CheckFloat(dout, device(), "dout");
  CheckDType(dtable, device(), DType::kF32, "dtable");
  CHECK_EQ(dtable.rank(), 2) << "dtable must be [V, H], got " << dtable.DebugString();
  const int64_t hidden = dtable.dim(1);
  CHECK(dout.rank() >= 1 && dout.dim(-1) == hidden && dout.numel() == ids.numel() * hidden)
      << "dout " << dout.DebugString() << " does not match ids " << ids.DebugString()
      << " and dtable " << dtable.DebugString();
  if (ids.numel() == 0 || hidden == 0) return;
  // The sorted ids, their runs and CUB's storage, as int32 words.
  const int64_t scratch_words =
      (static_cast<int64_t>(cuda::EmbeddingBackwardScratchBytes(ids.numel())) + 3) / 4;
  std::optional<Tensor> scratch =
      Scratch({scratch_words}, DType::kI32, "embedding-gradient sort", "EmbeddingBackward");
  if (!scratch) return;
  cuda::LaunchEmbeddingBackward(stream(), ids.data<int32_t>(), AsIn(dout), ids.numel(),
                                dtable.dim(0), hidden, dtable.data<float>(), error_word_,
                                scratch->raw_data(), scratch->nbytes());
}

// ---- RMSNorm (rms_norm.cu) ------------------------------------------------------

void CudaBackend::RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& y,
                                 Tensor* rstd) {
  if (!Begin()) return;
  CheckFloat(x, device(), "x");
  CheckFloat(weight, device(), "weight");
  CheckFloat(y, device(), "y");
  CheckShape(y, x, "y", "x");
  const int64_t d = weight.numel();
  CHECK(d > 0 && x.rank() >= 1 && x.dim(-1) == d)
      << "x " << x.DebugString() << " must have last dim weight.numel() of "
      << weight.DebugString();
  const int64_t rows = x.numel() / d;
  float* rstd_data = nullptr;
  if (rstd != nullptr) {
    CheckDType(*rstd, device(), DType::kF32, "rstd");
    CHECK_EQ(rstd->numel(), rows) << "rstd " << rstd->DebugString() << " for x " << x.DebugString();
    rstd_data = rstd->data<float>();
  }
  cuda::LaunchRmsNormForward(stream(), AsIn(x), AsIn(weight), rows, d, eps, AsOut(y), rstd_data);
}

void CudaBackend::RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                  const Tensor& dy, Tensor& dx, Tensor& dweight) {
  if (!Begin()) return;
  CheckFloat(x, device(), "x");
  CheckFloat(weight, device(), "weight");
  CheckDType(rstd, device(), DType::kF32, "rstd");
  CheckFloat(dy, device(), "dy");
  CheckFloat(dx, device(), "dx");
  CheckFloat(dweight, device(), "dweight");
  CheckShape(dy, x, "dy", "x");
  CheckShape(dx, x, "dx", "x");
  CheckShape(dweight, weight, "dweight", "weight");
  const int64_t d = weight.numel();
  CHECK(d > 0 && x.rank() >= 1 && x.dim(-1) == d)
      << "x " << x.DebugString() << " must have last dim weight.numel() of "
      << weight.DebugString();
  const int64_t rows = x.numel() / d;
  CHECK_EQ(rstd.numel(), rows) << "rstd " << rstd.DebugString() << " for x " << x.DebugString();
  if (rows == 0) return;
  const int groups = cuda::ColumnGroups(rows, d);
  std::optional<Tensor> partials =
      Scratch({groups, d}, DType::kF32, "RMSNorm weight-gradient partials", "RmsNormBackward");
  if (!partials) return;
  cuda::LaunchRmsNormBackward(stream(), AsIn(x), AsIn(weight), rstd.data<float>(), AsIn(dy), rows,
                              d, groups, partials->data<float>(), AsOut(dx), AsOut(dweight));
}

// ---- rope (rope.cu) -----------------------------------------------------------------

namespace {

void CheckRope(const Tensor& x, Device device, int64_t position_offset, const RopeTable& rope,
               const char* name) {
  CheckFloat(x, device, name);
  CHECK(x.rank() == 3 && x.dim(2) % 2 == 0 && x.dim(2) > 0)
      << name << " must be [T, H, head_dim] with an even head_dim, got " << x.DebugString();
  CHECK_EQ(x.dim(2), rope.head_dim())
      << name << " " << x.DebugString() << " does not match a rope table of head_dim "
      << rope.head_dim();
  CHECK_LE(x.dim(2), 2 * cuda::kMaxRopePairs)
      << "rope: head_dim " << x.dim(2) << " is over the CUDA limit of " << 2 * cuda::kMaxRopePairs;
  CHECK_GE(position_offset, 0) << "negative rope position offset";
}

cuda::RopeFreqs ToRopeFreqs(const RopeTable& rope) {
  cuda::RopeFreqs freqs{};
  for (size_t i = 0; i < rope.inv_freq.size(); ++i) freqs.inv_freq[i] = rope.inv_freq[i];
  freqs.attention_scaling = rope.attention_scaling;
  return freqs;
}

cuda::RopeDocuments ToRopeDocuments(const Tensor* doc_offsets, Device device) {
  if (doc_offsets == nullptr) return {};
  CheckDType(*doc_offsets, device, DType::kI32, "rope document offsets");
  CheckDocumentOffsets(*doc_offsets, 0, /*values=*/false, "rope");
  return {doc_offsets->data<int32_t>(), doc_offsets->dim(0)};
}

}  // namespace

void CudaBackend::RopeForward(Tensor& x, int64_t position_offset, const RopeTable& rope,
                              const Tensor* doc_offsets) {
  if (!Begin()) return;
  CheckRope(x, device(), position_offset, rope, "x");
  cuda::LaunchRope(stream(), AsOut(x), x.dim(0), x.dim(1), x.dim(2), position_offset,
                   ToRopeFreqs(rope), ToRopeDocuments(doc_offsets, device()), /*backward=*/false);
}

void CudaBackend::RopeBackward(Tensor& dx, int64_t position_offset, const RopeTable& rope,
                               const Tensor* doc_offsets) {
  if (!Begin()) return;
  CheckRope(dx, device(), position_offset, rope, "dx");
  cuda::LaunchRope(stream(), AsOut(dx), dx.dim(0), dx.dim(1), dx.dim(2), position_offset,
                   ToRopeFreqs(rope), ToRopeDocuments(doc_offsets, device()), /*backward=*/true);
}

// ---- bias (elementwise.cu) ----------------------------------------------------------

void CudaBackend::AddBias(Tensor& y, const Tensor& bias) {
  if (!Begin()) return;
  CheckFloat(y, device(), "y");
  CheckFloat(bias, device(), "bias");
  const int64_t m = bias.numel();
  CHECK(bias.rank() == 1 && y.rank() >= 1 && y.dim(-1) == m)
      << "AddBias: y " << y.DebugString() << " += bias " << bias.DebugString();
  cuda::LaunchAddBias(stream(), AsOut(y), AsIn(bias), cuda::RowsOf(y, m), m);
}

void CudaBackend::BiasBackward(const Tensor& dy, Tensor& dbias) {
  if (!Begin()) return;
  CheckFloat(dy, device(), "dy");
  CheckFloat(dbias, device(), "dbias");
  const int64_t m = dbias.numel();
  CHECK(dbias.rank() == 1 && dy.rank() >= 1 && dy.dim(-1) == m)
      << "BiasBackward: dbias " << dbias.DebugString() << " += column sums of dy "
      << dy.DebugString();
  const int64_t rows = cuda::RowsOf(dy, m);
  if (rows == 0 || m == 0) return;
  const int groups = cuda::ColumnGroups(rows, m);
  std::optional<Tensor> partials =
      Scratch({groups, m}, DType::kF32, "bias-gradient partials", "BiasBackward");
  if (!partials) return;
  cuda::LaunchColumnSums(stream(), AsIn(dy), rows, m, groups, partials->data<float>());
  cuda::LaunchAddPartials(stream(), partials->data<float>(), groups, m, AsOut(dbias));
}

// ---- SwiGLU (swiglu.cu) --------------------------------------------------------------

void CudaBackend::SwigluForward(const Tensor& gate, const Tensor& up, Tensor& out) {
  if (!Begin()) return;
  CheckFloat(gate, device(), "gate");
  CheckFloat(up, device(), "up");
  CheckFloat(out, device(), "out");
  CheckShape(up, gate, "up", "gate");
  CheckShape(out, gate, "out", "gate");
  cuda::LaunchSwigluForward(stream(), AsIn(gate), AsIn(up), AsOut(out), gate.numel());
}

void CudaBackend::SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout,
                                 Tensor& dgate, Tensor& dup) {
  if (!Begin()) return;
  CheckFloat(gate, device(), "gate");
  CheckFloat(up, device(), "up");
  CheckFloat(dout, device(), "dout");
  CheckFloat(dgate, device(), "dgate");
  CheckFloat(dup, device(), "dup");
  CheckShape(up, gate, "up", "gate");
  CheckShape(dout, gate, "dout", "gate");
  CheckShape(dgate, gate, "dgate", "gate");
  CheckShape(dup, gate, "dup", "gate");
  cuda::LaunchSwigluBackward(stream(), AsIn(gate), AsIn(up), AsIn(dout), AsOut(dgate), AsOut(dup),
                             gate.numel());
}

// ---- cross-entropy (cross_entropy.cu) -------------------------------------------------

namespace {

// Returns V for logits [N, V] and targets [N].
int64_t CheckLogits(const Tensor& logits, const Tensor& targets, Device device) {
  CheckFloat(logits, device, "logits");
  CheckDType(targets, device, DType::kI32, "targets");
  CHECK(logits.rank() >= 1 && logits.dim(-1) > 0 &&
        logits.numel() == targets.numel() * logits.dim(-1))
      << "logits " << logits.DebugString() << " must be [N, V] for targets "
      << targets.DebugString();
  CHECK_LT(targets.numel(), int64_t{1} << 31) << "too many rows for one launch";
  return logits.dim(-1);
}

void CheckPerRow(const Tensor& t, const Tensor& targets, Device device, const char* name) {
  CheckDType(t, device, DType::kF32, name);
  CHECK_EQ(t.numel(), targets.numel())
      << name << " " << t.DebugString() << " must have one value per target of "
      << targets.DebugString();
}

}  // namespace

double CudaBackend::CrossEntropyForwardBackward(Tensor& logits, const Tensor& targets,
                                                float scale) {
  if (!Begin()) return std::nan("");
  const int64_t v = CheckLogits(logits, targets, device());
  const int64_t n = targets.numel();
  if (n == 0) return 0.0;
  // n row losses, then their ordered sum, as doubles in an f32 scratch of
  // twice the size.
  std::optional<Tensor> doubles = Scratch({2 * (n + 1)}, DType::kF32, "cross-entropy row losses",
                                          "CrossEntropyForwardBackward");
  if (!doubles) return std::nan("");
  double* rows = static_cast<double*>(doubles->raw_data());
  cuda::LaunchCrossEntropy(stream(), AsOut(logits), targets.data<int32_t>(), n, v, scale, rows,
                           error_word_);
  cuda::LaunchSumInOrder(stream(), rows, n, rows + n);
  return ReadScalar(rows + n, "CrossEntropyForwardBackward");
}

void CudaBackend::LogProbsForward(const Tensor& logits, const Tensor& targets, Tensor& logprobs,
                                  Tensor& lse) {
  if (!Begin()) return;
  const int64_t v = CheckLogits(logits, targets, device());
  CheckPerRow(logprobs, targets, device(), "logprobs");
  CheckPerRow(lse, targets, device(), "lse");
  cuda::LaunchLogProbsForward(stream(), AsIn(logits), targets.data<int32_t>(), targets.numel(), v,
                              logprobs.data<float>(), lse.data<float>(), error_word_);
}

void CudaBackend::LogProbsBackward(Tensor& logits, const Tensor& targets, const Tensor& lse,
                                   const Tensor& dlogprobs) {
  if (!Begin()) return;
  const int64_t v = CheckLogits(logits, targets, device());
  CheckPerRow(lse, targets, device(), "lse");
  CheckPerRow(dlogprobs, targets, device(), "dlogprobs");
  cuda::LaunchLogProbsBackward(stream(), AsOut(logits), targets.data<int32_t>(), targets.numel(), v,
                               lse.data<float>(), dlogprobs.data<float>(), error_word_);
}

// ---- AdamW (adamw.cu) ------------------------------------------------------------------

void CudaBackend::AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                        const AdamWParams& params) {
  if (!Begin()) return;
  CheckDType(param, device(), DType::kF32, "param");
  CheckFloat(grad, device(), "grad");
  CheckDType(m, device(), DType::kF32, "m");
  CheckDType(v, device(), DType::kF32, "v");
  CheckShape(grad, param, "grad", "param");
  CheckShape(m, param, "m", "param");
  CheckShape(v, param, "v", "param");
  CHECK_GE(params.step, 1) << "AdamW step is 1-based";
  // The scalars exactly as kernels/cpu/adamw.cc forms them.
  const double step = static_cast<double>(params.step);
  const double bias_correction1 = 1.0 - std::pow(params.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(params.beta2, step);
  cuda::AdamWScalars s;
  s.b1 = static_cast<float>(params.beta1);
  s.b2 = static_cast<float>(params.beta2);
  s.one_minus_b1 = static_cast<float>(1.0 - params.beta1);
  s.one_minus_b2 = static_cast<float>(1.0 - params.beta2);
  s.eps = static_cast<float>(params.eps);
  s.decay = static_cast<float>(1.0 - params.lr * params.weight_decay);
  s.step_size = static_cast<float>(params.lr / bias_correction1);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.grad_scale = params.grad_scale;
  cuda::LaunchAdamW(stream(), param.data<float>(), AsIn(grad), m.data<float>(), v.data<float>(),
                    param.numel(), s);
}

// ---- reductions and elementwise (elementwise.cu) ---------------------------------------

double CudaBackend::SumSquares(const Tensor& x) {
  if (!Begin()) return std::nan("");
  CheckFloat(x, device(), "x");
  const int64_t n = x.numel();
  const int blocks = cuda::SumSquaresBlocks(n);
  // blocks partials and the result, as doubles in an f32 scratch of twice the size.
  std::optional<Tensor> doubles =
      Scratch({2 * (blocks + 1)}, DType::kF32, "sum-of-squares partials", "SumSquares");
  if (!doubles) return std::nan("");
  double* partials = static_cast<double*>(doubles->raw_data());
  cuda::LaunchSumSquares(stream(), AsIn(x), n, blocks, partials, partials + blocks);
  return ReadScalar(partials + blocks, "SumSquares");
}

void CudaBackend::Add(const Tensor& a, const Tensor& b, Tensor& out) {
  if (!Begin()) return;
  CheckFloat(a, device(), "a");
  CheckFloat(b, device(), "b");
  CheckFloat(out, device(), "out");
  CheckShape(b, a, "b", "a");
  CheckShape(out, a, "out", "a");
  cuda::LaunchAdd(stream(), AsIn(a), AsIn(b), AsOut(out), a.numel());
}

void CudaBackend::Axpy(float alpha, const Tensor& x, Tensor& y) {
  if (!Begin()) return;
  CheckFloat(x, device(), "x");
  CheckFloat(y, device(), "y");
  CheckShape(y, x, "y", "x");
  cuda::LaunchAxpy(stream(), alpha, AsIn(x), AsOut(y), x.numel());
}

void CudaBackend::Scale(Tensor& x, float s) {
  if (!Begin()) return;
  CheckFloat(x, device(), "x");
  cuda::LaunchScale(stream(), AsOut(x), s, x.numel());
}

void CudaBackend::Fill(Tensor& x, float value) {
  if (!Begin()) return;
  CheckOn(x, device(), "x");
  if (x.dtype() == DType::kI32) {
    CHECK(std::trunc(value) == value && value >= -2147483648.0f && value < 2147483648.0f)
        << "Fill of " << x.DebugString() << " with " << value << ": not an int32 value";
    cuda::LaunchFillInt(stream(), x.data<int32_t>(), static_cast<int32_t>(value), x.numel());
    return;
  }
  cuda::LaunchFill(stream(), AsOut(x), value, x.numel());
}

void CudaBackend::Cast(const Tensor& src, Tensor& dst) {
  if (!Begin()) return;
  CheckOn(src, device(), "src");
  CheckOn(dst, device(), "dst");
  CheckShape(dst, src, "dst", "src");
  if (src.dtype() == dst.dtype()) {
    if (src.raw_data() != dst.raw_data() && src.nbytes() > 0) {
      SBP_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(),
                                     cudaMemcpyDeviceToDevice, stream()));
    }
    return;
  }
  CheckFloat(src, device(), "src");
  CheckFloat(dst, device(), "dst");
  cuda::LaunchCast(stream(), AsIn(src), AsOut(dst), src.numel());
}

}  // namespace sbp
