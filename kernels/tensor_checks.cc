#include "kernels/tensor_checks.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace sbp {
namespace {

float ElementAsFloat(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::kBF16) return Bf16ToFloat(t.data<bf16_t>()[i]);
  return t.data<float>()[i];
}

}  // namespace

absl::Status CheckFinite(const Tensor& tensor, absl::string_view name) {
  CHECK(tensor.device().is_cpu()) << "CheckFinite on " << tensor.DebugString();
  if (tensor.dtype() == DType::kI32) return absl::OkStatus();
  const int64_t n = tensor.numel();
  int64_t bad = 0;
  int64_t first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(ElementAsFloat(tensor, i))) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " ", tensor.DebugString(), " has ", bad,
                                                 " non-finite values; first at flat index ",
                                                 first, " = ", ElementAsFloat(tensor, first)));
}

double RelativeError(const Tensor& a, const Tensor& b) {
  CHECK_EQ(a.numel(), b.numel()) << a.DebugString() << " vs " << b.DebugString();
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = ElementAsFloat(a, i), y = ElementAsFloat(b, i);
    diff += (x - y) * (x - y);
    ref += y * y;
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

}  // namespace sbp
