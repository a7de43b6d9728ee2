// What both control-plane benchmarks (bench_control_plane.cc and
// control_plane_scale.cc) need: elapsed milliseconds, a call context with a
// deadline, and the job spec they submit.
#pragma once

#include <grpcpp/client_context.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace sbp::bench {

using Clock = std::chrono::steady_clock;

inline double MsSince(Clock::time_point start, Clock::time_point end = Clock::now()) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

// A context whose call ends after `seconds`. With `wait_for_ready`, a
// connection that fails to open is retried until then, as the worker agent
// retries its calls, instead of failing the call at once.
inline std::unique_ptr<grpc::ClientContext> CallContext(double seconds, bool wait_for_ready) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_wait_for_ready(wait_for_ready);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  return context;
}

// A small SFT job on the example model (it never runs: no real worker).
inline std::string BenchJobSpec(const std::string& name) {
  return "name: " + name +
         "\nmodel: examples/models/tiny-qwen3\ndata: examples/data/tiny-sft.jsonl\n"
         "objective: sft\nseq_len: 64\ntrain: {steps: 10, sequences_per_step: 8}\n"
         "resources: {world_size: 1, device: cpu}\n";
}

}  // namespace sbp::bench
