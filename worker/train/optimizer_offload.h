// Optimizer offload on one worker (ZeRO-Offload): the fp32 gradient sum, the
// fp32 master weights and the AdamW moments live in host memory
// (Backend::host_allocator(): pinned on CUDA) and are updated by the CPU
// (a CpuBackend over that memory: the same kernels as the CPU device, so on
// the CPU every result is bit-identical to the on-device optimizer). The
// device keeps the compute weights and a one-layer gradient cache.
//
// Gradients (the state is the engine's GradientSink). Acquire hands the
// backward a device f32 buffer with the group's layout: for layers one of two
// cache slots (double-buffered: a slot is reused once its previous download
// has landed), for the embed and final groups a buffer of their own while
// they are open and downloading (freed at the next layer's Release, the next
// pass or FinishBackward, once the download is done: at fixed points, so that
// the device's peak does not depend on the copy thread's timing). The buffer
// starts from the step's sum so far:
//   the step's first pass over the group   buffer = 0
//   a later pass (more sequences per step)  buffer = host sum (an upload)
// the backward accumulates into it, and Release queues its download, which
// overwrites the host group. Every element therefore sees the same additions
// in the same order as the on-device gradient store (0 + pass 1 + pass 2 ...),
// whatever the number of sequences per step. In a later pass the upload of
// layer l-1's sum is queued when layer l is acquired (one layer ahead), so
// it runs beside layer l's backward.
//
// Copies run on the backend's transfer queue, in order: a download starts
// after the ops that wrote its group; the compute waits (in its own stream on
// CUDA) only for the copies it reads or whose memory it overwrites.
//
// Update: AdamW on the host masters (weight decay per tensor as
// AdamWOptimizer does), then the compute copy: each group's masters as they
// are (f32 compute weights) or cast on the host in chunks into two staging
// buffers (bf16), uploaded through the queue. Update returns with the
// device's later ops ordered after the uploads (CUDA: the compute stream
// waits on the copy stream; the host does not wait), so the next forward
// reads the new weights.
//
// Checkpoints have LocalOptimizerState's format (the masters are written
// when the run keeps separate masters or the model file cannot hold them),
// so a run resumes with or without offload.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/engine/engine.h"
#include "worker/train/job_spec.h"
#include "worker/train/optimizer_state.h"

namespace sbp {

// The offloaded state for a single worker (options.comm must be null),
// installed as `engine`'s gradient sink. options.initial (f32, host or
// device) is where the host masters start.
absl::StatusOr<std::unique_ptr<OptimizerState>> CreateOffloadedOptimizerState(
    const OptimizerStateOptions& options, Backend& backend, const TrainSpec& train, Engine& engine);

}  // namespace sbp
