// Harness of the backend op tests that run one op on two backends from the
// same inputs (ggml's test-backend-ops pattern). A case lists its tensors
// (initial host contents and a kind that says how each is stored) and a
// function that runs the op on a backend. Run() places the tensors on the
// backend's device in the requested precision, runs the op, and returns the
// outputs (and the op's scalar) as doubles on the host.
//
// Precisions: f32 stores everything as f32. bf16 stores the kAct tensors
// (activations, weights, activation gradients) as bf16; on the CPU backend,
// which computes in f32 only, it emulates the same computation "done in bf16"
// by rounding the kAct inputs to bf16 before the op and its kAct outputs
// after it. kF32 tensors (per-row statistics, parameter gradients, optimizer
// state) are f32 in both; kI32 holds ids and targets.
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/elementwise.h"
#include "tests/kernels/op_test_util.h"

namespace sbp::backend_test {

using op_test::Vec;

enum class Kind { kAct, kF32, kI32 };

struct Arg {
  std::string name;
  Kind kind;
  Tensor init;  // host f32 or i32 contents before the op
  bool output;  // compared after the op (written, accumulated or in place)
};

// The run's tensors on the backend's device, by name.
struct Args {
  std::map<std::string, Tensor> tensors;
  Tensor& operator[](const std::string& name) {
    auto it = tensors.find(name);
    CHECK(it != tensors.end()) << "no tensor named " << name;
    return it->second;
  }
};

struct OpCase {
  std::string name;
  std::vector<Arg> args;
  // Runs the op; returns its scalar result (0 for ops without one).
  std::function<double(Backend&, Args&)> run;
  bool has_scalar = false;
};

struct RunResult {
  std::map<std::string, Vec> outputs;
  double scalar = 0.0;
};

// NaN marks memory an op must write.
inline Tensor Unwritten(const Shape& shape) {
  Tensor t = op_test::NewTensor(shape);
  op_test::FillWith(t, std::nanf(""));
  return t;
}

inline void RoundToBf16(Tensor& host_f32) {
  float* p = host_f32.data<float>();
  for (int64_t i = 0; i < host_f32.numel(); ++i) p[i] = Bf16ToFloat(FloatToBf16(p[i]));
}

inline double RoundToBf16(double x) { return Bf16ToFloat(FloatToBf16(static_cast<float>(x))); }

// Host copy (as doubles) of a tensor on `backend`'s device.
inline Vec ToHost(Backend& backend, const Tensor& t) {
  Tensor host = op_test::NewTensor(t.shape(), t.dtype());
  backend.Copy(t, host);
  if (t.dtype() == DType::kI32) {
    Vec out(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = host.data<int32_t>()[i];
    return out;
  }
  return op_test::ToDouble(host);
}

inline RunResult Run(const OpCase& c, Backend& backend, bool bf16) {
  const bool on_cpu = backend.device().is_cpu();
  Args args;
  for (const Arg& a : c.args) {
    Tensor host = op_test::Clone(a.init);
    DType dtype = a.init.dtype();
    if (bf16 && a.kind == Kind::kAct) {
      RoundToBf16(host);
      if (!on_cpu) {
        Tensor rounded = op_test::NewTensor(host.shape(), DType::kBF16);
        cpu::Cast(host, rounded);
        host = rounded;
        dtype = DType::kBF16;
      }
    }
    if (on_cpu) {
      args.tensors[a.name] = host;
      continue;
    }
    auto device = Tensor::Empty(backend.allocator(), host.shape(), dtype, a.name);
    CHECK_OK(device.status());
    backend.Copy(host, *device);
    args.tensors[a.name] = *device;
  }
  RunResult result;
  result.scalar = c.run(backend, args);
  backend.Synchronize();
  for (const Arg& a : c.args) {
    if (!a.output) continue;
    Vec v = ToHost(backend, args[a.name]);
    if (bf16 && on_cpu && a.kind == Kind::kAct) {
      for (double& x : v) x = RoundToBf16(x);
    }
    result.outputs[a.name] = std::move(v);
  }
  return result;
}

}  // namespace sbp::backend_test
