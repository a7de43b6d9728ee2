// The three GEMM layouts of a linear layer and its bias on cuBLAS (see
// kernels/cpu/matmul.h for the math):
//   MatmulXWt:       y  [N, M]  = x  [N, K] . w [M, K]^T   (+= when accumulate)
//   MatmulDyW:       dx [N, K]  = dy [N, M] . w [M, K]     (+= when accumulate)
//   MatmulAccumDyTX: dw [M, K] += dy [N, M]^T . x [N, K]
// Row-major [R, C] is column-major C x R with leading dim C, so each layout is
// one cublasGemmEx on the transposed problem (C^T = B^T A^T):
//   y^T  (M x N) = w^T-as-stored^T . x^T :  T, N, m=M, n=N, k=K, A=w (lda K), B=x (ldb K)
//   dx^T (K x N) = w-as-stored . dy^T    :  N, N, m=K, n=N, k=M, A=w (lda K), B=dy (ldb M)
//   dw^T (K x M) = x^T . dy              :  N, T, m=K, n=M, k=N, A=x (lda K), B=dy (ldb M)
// CUBLAS_COMPUTE_32F: fp32 accumulation; f32 operands stay fp32 (no TF32).
// With any bf16 tensor in the product, f32 operands are rounded to bf16 into
// scratch first (cuBLAS needs equal input types); the output may be f32 or
// bf16 either way.
#include <climits>
#include <cstdint>

#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/tensor_args.h"

namespace sbp {
namespace {

cudaDataType_t CudaType(DType dtype) { return dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

int CublasInt(int64_t n, const char* op) {
  CHECK(n >= 0 && n <= INT_MAX) << op << ": dimension " << n << " is too large for cuBLAS";
  return static_cast<int>(n);
}

void CheckWeight(const Tensor& w, Device device, const char* name) {
  cuda::CheckFloat(w, device, name);
  CHECK_EQ(w.rank(), 2) << name << " must be [M, K], got " << w.DebugString();
}

// Rows of a [..., cols] tensor: the product of the leading dims (as on the
// CPU; with cols = 0 there are still rows, e.g. dx of a K = 0 product).
int64_t RowCount(const Tensor& t, const char* name) {
  CHECK(t.rank() >= 1) << name << " must have at least one dim, got " << t.DebugString();
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.rank(); ++i) rows *= t.dim(i);
  return rows;
}

}  // namespace

void CudaBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Tensor& a,
                       int64_t lda, const Tensor& b, int64_t ldb, bool accumulate, Tensor& c,
                       int64_t ldc, const char* op) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) Fill(c, 0.0f);
    return;
  }
  const bool bf16 =
      a.dtype() == DType::kBF16 || b.dtype() == DType::kBF16 || c.dtype() == DType::kBF16;
  Tensor a_in = a, b_in = b;
  if (bf16 && a.dtype() == DType::kF32) {
    std::optional<Tensor> rounded =
        Scratch(a.shape(), DType::kBF16, "matmul operand rounded to bf16", op);
    if (!rounded) return;
    a_in = *std::move(rounded);
    cuda::LaunchCast(stream(), cuda::AsIn(a), cuda::AsOut(a_in), a.numel());
  }
  if (bf16 && b.dtype() == DType::kF32) {
    std::optional<Tensor> rounded =
        Scratch(b.shape(), DType::kBF16, "matmul operand rounded to bf16", op);
    if (!rounded) return;
    b_in = *std::move(rounded);
    cuda::LaunchCast(stream(), cuda::AsIn(b), cuda::AsOut(b_in), b.numel());
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cublasStatus_t status = cublas_api_->gemm_ex(
      cublas_, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      CublasInt(m, op), CublasInt(n, op), CublasInt(k, op), &alpha, a_in.raw_data(),
      CudaType(a_in.dtype()), CublasInt(lda, op), b_in.raw_data(), CudaType(b_in.dtype()),
      CublasInt(ldb, op), &beta, c.raw_data(), CudaType(c.dtype()), CublasInt(ldc, op),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  CHECK(status == CUBLAS_STATUS_SUCCESS)
      << op << ": cublasGemmEx failed: " << cuda::DescribeCublas(status) << " for m=" << m
      << " n=" << n << " k=" << k << ", " << a.DebugString() << " x " << b.DebugString() << " -> "
      << c.DebugString();
  cuda::CheckLaunch(op, stream());
}

void CudaBackend::MatmulXWt(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) {
  if (!Begin()) return;
  cuda::CheckFloat(x, device(), "x");
  CheckWeight(w, device(), "w");
  cuda::CheckFloat(y, device(), "y");
  const int64_t m = w.dim(0), k = w.dim(1);
  const int64_t n = RowCount(x, "x");
  CHECK(x.dim(-1) == k && y.dim(-1) == m && RowCount(y, "y") == n)
      << "MatmulXWt: y " << y.DebugString() << " = x " << x.DebugString() << " . w^T "
      << w.DebugString();
  Gemm(true, false, m, n, k, w, k, x, k, accumulate, y, m, "MatmulXWt");
}

void CudaBackend::MatmulDyW(const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate) {
  if (!Begin()) return;
  cuda::CheckFloat(dy, device(), "dy");
  CheckWeight(w, device(), "w");
  cuda::CheckFloat(dx, device(), "dx");
  const int64_t m = w.dim(0), k = w.dim(1);
  const int64_t n = RowCount(dy, "dy");
  CHECK(dy.dim(-1) == m && dx.dim(-1) == k && RowCount(dx, "dx") == n)
      << "MatmulDyW: dx " << dx.DebugString() << " = dy " << dy.DebugString() << " . w "
      << w.DebugString();
  Gemm(false, false, k, n, m, w, k, dy, m, accumulate, dx, k, "MatmulDyW");
}

void CudaBackend::MatmulAccumDyTX(const Tensor& dy, const Tensor& x, Tensor& dw) {
  if (!Begin()) return;
  cuda::CheckFloat(dy, device(), "dy");
  cuda::CheckFloat(x, device(), "x");
  CheckWeight(dw, device(), "dw");
  const int64_t m = dw.dim(0), k = dw.dim(1);
  const int64_t n = RowCount(dy, "dy");
  CHECK(dy.dim(-1) == m && x.dim(-1) == k && RowCount(x, "x") == n)
      << "MatmulAccumDyTX: dw " << dw.DebugString() << " += dy^T " << dy.DebugString() << " . x "
      << x.DebugString();
  Gemm(false, true, k, m, n, x, k, dy, m, /*accumulate=*/true, dw, k, "MatmulAccumDyTX");
}

}  // namespace sbp
