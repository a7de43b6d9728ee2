// CudaBackend plumbing: creation, transfers, synchronisation, the device
// error word and scratch. The ops are defined in cuda_ops.cc, matmul.cc and
// cuda_attention.cc.
#include "kernels/cuda/cuda_backend.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernel_args.h"
#include "kernels/cuda/tensor_args.h"

namespace sbp {

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(CudaAllocator& allocator,
                                                                 CudaBackendOptions options) {
  if (options.activation_dtype != DType::kF32 && options.activation_dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA activations must be f32 or bf16, not ",
                                                   DTypeName(options.activation_dtype)));
  }
  absl::StatusOr<const cuda::CublasLibrary*> cublas = cuda::LoadCublas();
  if (!cublas.ok()) return cublas.status();
  std::unique_ptr<CudaBackend> backend(new CudaBackend(allocator, options));
  backend->cublas_api_ = *cublas;
  backend->Bind();
  // Failures here (no memory left on the device, a driver that does not fit
  // cuBLAS) are statuses: the caller reports them; the process goes on.
  auto blas = [](cublasStatus_t status, const char* call) {
    return status == CUBLAS_STATUS_SUCCESS
               ? absl::OkStatus()
               : absl::InternalError(absl::StrCat(call, " failed: ", cuda::DescribeCublas(status)));
  };
  auto rt = [](cudaError_t status, const char* call) {
    if (status == cudaSuccess) return absl::OkStatus();
    (void)cudaGetLastError();  // reported here, not at the next launch
    const bool oom = status == cudaErrorMemoryAllocation;
    return absl::Status(oom ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kInternal,
                        absl::StrCat(call, " failed: ", cudaGetErrorName(status), " (",
                                     cudaGetErrorString(status), ")"));
  };
  RETURN_IF_ERROR(blas((*cublas)->create(&backend->cublas_), "cublasCreate"));
  RETURN_IF_ERROR(
      blas((*cublas)->set_stream(backend->cublas_, allocator.stream()), "cublasSetStream"));
  RETURN_IF_ERROR(blas((*cublas)->set_pointer_mode(backend->cublas_, CUBLAS_POINTER_MODE_HOST),
                       "cublasSetPointerMode"));
  // No TF32: f32 GEMMs stay fp32 so that they match the CPU reference; and
  // no split-K reduction in a bf16 output's precision: every product
  // accumulates in fp32 (the LM head's dx sums over ~150k vocabulary rows).
  RETURN_IF_ERROR(blas((*cublas)->set_math_mode(
                           backend->cublas_, static_cast<cublasMath_t>(
                                                 CUBLAS_DEFAULT_MATH |
                                                 CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                       "cublasSetMathMode"));
  if (options.cublas_workspace_bytes > 0) {
    auto workspace = allocator.Allocate(options.cublas_workspace_bytes, "cuBLAS workspace");
    if (!workspace.ok()) return workspace.status();
    backend->workspace_ = *std::move(workspace);
    RETURN_IF_ERROR(blas((*cublas)->set_workspace(backend->cublas_, backend->workspace_->data(),
                                                  backend->workspace_->bytes()),
                         "cublasSetWorkspace"));
  }
  RETURN_IF_ERROR(rt(cudaMalloc(reinterpret_cast<void**>(&backend->error_word_), sizeof(int)),
                     "cudaMalloc (error word)"));
  RETURN_IF_ERROR(rt(cudaMemsetAsync(backend->error_word_, 0, sizeof(int), allocator.stream()),
                     "cudaMemsetAsync"));
  RETURN_IF_ERROR(rt(cudaMallocHost(reinterpret_cast<void**>(&backend->error_host_), sizeof(int)),
                     "cudaMallocHost"));
  RETURN_IF_ERROR(
      rt(cudaMallocHost(reinterpret_cast<void**>(&backend->scalar_host_), sizeof(double)),
         "cudaMallocHost"));
  backend->SyncAndCheck("creating the CUDA backend");
  return backend;
}

CudaBackend::~CudaBackend() {
  Bind();
  cudaStreamSynchronize(stream());
  if (cublas_ != nullptr) cublas_api_->destroy(cublas_);
  workspace_.reset();
  if (error_word_ != nullptr) cudaFree(error_word_);
  if (error_host_ != nullptr) cudaFreeHost(error_host_);
  if (scalar_host_ != nullptr) cudaFreeHost(scalar_host_);
}

void CudaBackend::Bind() const { SBP_CUDA_CHECK(cudaSetDevice(allocator_.index())); }

bool CudaBackend::Begin() const {
  Bind();
  return deferred_.ok();
}

std::optional<Tensor> CudaBackend::Scratch(Shape shape, DType dtype, const char* what,
                                           const char* op) {
  auto t = Tensor::Empty(allocator_, std::move(shape), dtype, what);
  if (t.ok()) return *std::move(t);
  if (deferred_.ok()) {
    deferred_ = absl::Status(t.status().code(), absl::StrCat(op, ": no device memory for its ",
                                                             "scratch: ", t.status().message()));
  }
  return std::nullopt;
}

absl::Status CudaBackend::TakeDeferredError() {
  absl::Status status = std::move(deferred_);
  deferred_ = absl::OkStatus();
  return status;
}

void CudaBackend::SyncAndCheck(const char* op) {
  // A kernel's fault often surfaces here, at the copy of the error word:
  // name the op either way.
  cudaError_t status =
      cudaMemcpyAsync(error_host_, error_word_, sizeof(int), cudaMemcpyDeviceToHost, stream());
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream());
  CHECK(status == cudaSuccess) << op << ": a kernel failed on " << DeviceName(device()) << ": "
                               << cudaGetErrorName(status) << " (" << cudaGetErrorString(status)
                               << "); run with SBP_CUDA_SYNC_CHECK=1 to name the kernel";
  const int error = *error_host_;
  if (error != 0) {
    std::string what;
    if (error & cuda::kErrorTokenId) what += " a token id outside the vocabulary;";
    if (error & cuda::kErrorTarget) what += " a target outside the vocabulary (and not -100);";
    SBP_CUDA_CHECK(cudaMemsetAsync(error_word_, 0, sizeof(int), stream()));
    CHECK(false) << op << ": the device found" << what
                 << " the bad rows were skipped (an embedding row or a loss row was zeroed)";
  }
}

double CudaBackend::ReadScalar(const double* device_value, const char* op) {
  SBP_CUDA_CHECK(cudaMemcpyAsync(scalar_host_, device_value, sizeof(double), cudaMemcpyDeviceToHost,
                                 stream()));
  SyncAndCheck(op);
  return *scalar_host_;
}

void CudaBackend::Synchronize() {
  Bind();
  SyncAndCheck("Synchronize");
}

std::unique_ptr<TransferQueue> CudaBackend::NewTransferQueue() {
  Bind();
  return std::make_unique<CudaTransferQueue>(allocator_.index(), allocator_.stream());
}

void CudaBackend::Copy(const Tensor& src, Tensor& dst) {
  if (!Begin()) return;
  for (const Tensor* t : {&src, static_cast<const Tensor*>(&dst)}) {
    CHECK(t->defined() && t->is_contiguous() && (t->device().is_cpu() || t->device() == device()))
        << "Copy: " << t->DebugString() << " must be contiguous, on the host or on "
        << DeviceName(device());
  }
  cuda::CheckShape(dst, src, "Copy dst", "src");
  CHECK(src.dtype() == dst.dtype()) << "Copy from " << src.DebugString() << " to "
                                    << dst.DebugString() << ": dtypes differ (use Cast)";
  if (src.nbytes() == 0 || src.raw_data() == dst.raw_data()) return;
  SBP_CUDA_CHECK(
      cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDefault, stream()));
  // Host memory on either side: wait, so that src may be reused and dst read.
  if (src.device().is_cpu() || dst.device().is_cpu()) SyncAndCheck("Copy");
}

// One strided 2-D copy per block: the row pitch of `rows` is C elements,
// a block region's is w.
void CudaBackend::CopyColumnBlocks(const Tensor& rows, const Tensor& blocks,
                                   const std::vector<int64_t>& column_offsets, int64_t width,
                                   int64_t offset_in_block, bool to_blocks) {
  if (!Begin()) return;
  CHECK(rows.device() == device() && blocks.device() == device())
      << "CopyColumnBlocks: " << rows.DebugString() << ", " << blocks.DebugString();
  CheckColumnBlocks(rows, blocks, column_offsets, width, offset_in_block);
  const int64_t n = rows.dim(0), columns = rows.dim(1), block = blocks.dim(1);
  if (n == 0 || width == 0) return;
  const size_t element = DTypeSize(rows.dtype());
  auto* matrix = static_cast<char*>(rows.raw_data());
  auto* stack = static_cast<char*>(blocks.raw_data());
  for (size_t j = 0; j < column_offsets.size(); ++j) {
    char* region = stack + (static_cast<int64_t>(j) * block + offset_in_block) * element;
    char* first_column = matrix + column_offsets[j] * element;
    const size_t line = static_cast<size_t>(width) * element;
    const size_t row_pitch = static_cast<size_t>(columns) * element;
    if (to_blocks) {
      SBP_CUDA_CHECK(cudaMemcpy2DAsync(region, line, first_column, row_pitch, line,
                                       static_cast<size_t>(n), cudaMemcpyDeviceToDevice, stream()));
    } else {
      SBP_CUDA_CHECK(cudaMemcpy2DAsync(first_column, row_pitch, region, line, line,
                                       static_cast<size_t>(n), cudaMemcpyDeviceToDevice, stream()));
    }
  }
}

}  // namespace sbp
