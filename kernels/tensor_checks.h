// Numeric checks on tensors, used by tests and by the engine's debug mode.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace sbp {

// OK when every element of a host f32/bf16 tensor is finite; otherwise an
// InvalidArgument error naming `name`, the first bad index and value, and how
// many elements are NaN or infinite.
absl::Status CheckFinite(const Tensor& tensor, absl::string_view name);

// Normwise relative error ||a - b|| / max(||b||, tiny) of two host f32 tensors
// of equal numel, in double precision.
double RelativeError(const Tensor& a, const Tensor& b);

}  // namespace sbp
