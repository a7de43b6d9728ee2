// The training-step engine: loss and parameter gradients of a causal LM for
// one token sequence, computed three ways that agree to fp32 rounding:
//
//   kFull        keep every intermediate of every layer (no recomputation),
//                full T x V logits and gradient — the "no checkpointing" baseline;
//   kCheckpoint  keep only each layer's input, recompute a whole layer in its
//                backward, full T x V logits and their T x V gradient —
//                gradient checkpointing as Hugging Face does it;
//   kStream      StreamBP: keep only layer inputs; per layer compute K/V for
//                the whole sequence once, then recompute and backpropagate
//                query chunks of chunk_tokens rows, accumulating dK/dV, which
//                go through the k/v projections at the end; dY is overwritten
//                by dX in place. The LM head runs over chunks of
//                logits_chunk_tokens rows and never holds T x V logits.
//
// Memory (stream): weights + gradients + L*T*H layer inputs (two T*H slots
// with a checkpoint store: set_checkpoint_store) + O(T * kv_dim)
// K/V buffers + O(chunk) temporaries. All allocations go through the
// backend's allocator, whose peak is the engine's memory figure.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/engine/offload/checkpoint_store.h"
#include "worker/engine/parameter_store.h"
#include "worker/engine/sequence_group.h"
#include "worker/engine/token_loss.h"
#include "worker/model/model_config.h"

namespace sbp {

enum class BackwardMode { kFull, kCheckpoint, kStream };

absl::string_view BackwardModeName(BackwardMode mode);  // "full", "checkpoint", "stream"
absl::StatusOr<BackwardMode> ParseBackwardMode(absl::string_view text);

// Receives a backward pass's parameter gradients one group at a time (the
// ZeRO-2 one-layer cache). Groups follow ParameterStore's numbering: embed 0,
// layer i at 1 + i, final at L + 1. Before the engine first writes a group's
// gradients it calls Acquire(group, grads), which binds that group's views in
// `grads` to zero-filled memory; once the group is complete for this pass it
// calls Release(group). Every pass releases in the same order: final, layers
// L-1 .. 0, embed. With tied embeddings the LM head writes into the embed
// group, which is then acquired before the head and released last. The
// engine only adds into a group's memory, so a sink may also bind memory
// that already holds a partial sum (an offloaded optimizer's later passes of
// a step), provided every pass's additions land in the same order.
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // Called once at the start of each backward pass.
  virtual absl::Status BeginPass() = 0;
  virtual absl::Status Acquire(int group, ModelTensors& grads) = 0;
  virtual absl::Status Release(int group) = 0;
};

// Provides a pass's compute weights one group at a time (ZeRO-3,
// worker/dist/sharded_weights.h: each rank keeps 1/N of every group and
// all-gathers a group before it is read). Groups are numbered as for
// GradientSink. Acquire(group, next, weights) binds group `group`'s views in
// `weights` to memory that holds the whole group until Release(group);
// `next` (-1: none) is the group the pass acquires after this one, which
// the source may start gathering now. A pass holds at most one layer group
// at a time, and releases it before it acquires the next layer. Orders (L
// layers, e = embed 0, f = final L + 1):
//   Forward          e, 0 .. L-1, f (tied: f, then e for the head)
//   ForwardBackward  e, 0 .. L-1, f (tied: f, e), then L-1 .. 0
// The embedding's backward reads no weights.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual absl::Status Acquire(int group, int next, ModelTensors& weights) = 0;
  virtual absl::Status Release(int group) = 0;
};

struct EngineOptions {
  BackwardMode mode = BackwardMode::kStream;
  int64_t chunk_tokens = 0;         // 0: automatic
  int64_t logits_chunk_tokens = 0;  // 0: automatic
};

// Automatic chunk sizes where no memory budget chooses them (with one, the
// memory planner's PlanAutoChunks does): query chunks of up to 1024 rows.
//
// Logits chunks are sized for the LM head's GEMMs. Each chunk runs three
// GEMMs that stream a V x H matrix: the logits and dL/dhidden read (and the
// BLAS packs) the head weight, dW_head += dlogits^T h reads and writes the
// whole head gradient; their rate grows with the rows that share that
// traffic. On the CPU (OpenBLAS SkylakeX kernels, 2 threads, bench-qwen3,
// sgemm 406 GFLOP/s) the head's GEMMs ran at 232, 264, 320, 325 and 349
// GFLOP/s with chunks of 110, 128, 256, 512 and 2048 rows, and the stream
// step at T = 4096 took 11.3-11.9 s with 110 rows, 9.2-9.3 s with 256 and
// 8.8-9.3 s with 512 (row counts that are not a multiple of the kernels'
// tiles run their remainder paths). On a GPU the fp32 head gradient's
// 8 V H bytes per chunk outweigh its 2 rows V H FLOPs below about
// 4 x (FLOP rate / bandwidth) rows, ~740 on an H200. So: 512 rows on the
// CPU, 4096 on CUDA, fewer where a chunk's logits (`element_bytes` each)
// would pass 512 MiB (CPU) or 2 GiB (CUDA); a multiple of 64 (CPU) or 256
// (CUDA) rows, at least one such multiple, at most `tokens`.
int64_t AutoChunkTokens(const ModelConfig& config, int64_t tokens);
int64_t AutoLogitsChunkTokens(const ModelConfig& config, int64_t tokens, DeviceKind device,
                              int64_t element_bytes);

// Whether `backend` can run `config`'s attention and RoPE (the CUDA kernels
// have head_dim and head-count limits the CPU's do not): call before making
// an Engine, so that such a model is an error naming the limit.
absl::Status CheckModelRunsOn(const ModelConfig& config, const Backend& backend);

class Engine {
 public:
  Engine(const ModelConfig& config, Backend& backend, EngineOptions options);

  // Forward and backward of one sequence: ids [T] i32, targets [T] i32 (the
  // label of position t is the token t+1, -100 ignored). Returns the loss
  // contribution; gradients ACCUMULATE into `grads`. With LoRA adapters in
  // `weights` (layers[i].lora), `grads` may leave the base tensors undefined:
  // they are frozen and get no gradient. ResourceExhausted when
  // the allocator's budget is too small. `doc_offsets` (i32 [n + 1] on the
  // backend's device, kernels/documents.h) makes the sequence n packed
  // documents: positions restart and attention stays inside each document, in
  // every mode and chunking (chunks may cut through documents).
  absl::StatusOr<double> ForwardBackward(const ModelTensors& weights, const Tensor& ids,
                                         const Tensor& targets, TokenLoss& loss,
                                         ModelTensors& grads, const Tensor* doc_offsets = nullptr);

  // Loss contribution only (chunked forward, nothing stored for backward).
  absl::StatusOr<double> Forward(const ModelTensors& weights, const Tensor& ids,
                                 const Tensor& targets, TokenLoss& loss,
                                 const Tensor* doc_offsets = nullptr);

  // Rows per query chunk and per logits chunk for a sequence of `tokens`:
  // the whole sequence for the baselines' training step, the options (or the
  // automatic sizes) otherwise, at most `tokens`.
  struct ChunkPlan {
    int64_t tokens, chunk, logits_chunk;
  };
  ChunkPlan PlanChunks(int64_t tokens, bool training) const;

  // Without a sink (the default) gradients accumulate into the `grads`
  // given to ForwardBackward; with one, the sink provides each group's
  // gradient memory and takes it back when the group is complete.
  void set_gradient_sink(GradientSink* sink) { sink_ = sink; }

  // Without a source (the default) the passes read the weights given to
  // them; with one, those are a frame (ParameterStore::CreateLayout's views,
  // LoRA adapters attached) whose groups the source binds while they are in
  // use. The source must outlive the engine's passes.
  void set_weight_source(WeightSource* source) { weight_source_ = source; }
  WeightSource* weight_source() const { return weight_source_; }

  // Where training passes keep their layer inputs: null (the default) on
  // the device, else in `store`'s tier (host memory or disk) with two device
  // slots (layer_inputs.h). Results are bit-identical in every tier. The
  // store must outlive the engine's passes.
  void set_checkpoint_store(CheckpointStore* store) { checkpoint_store_ = store; }
  CheckpointStore* checkpoint_store() const { return checkpoint_store_; }

  // Ulysses sequence parallelism (ulysses_attention.h; null, the default:
  // off). Every rank of `group` passes the whole sequence to Forward and
  // ForwardBackward; each computes its piece of T / P rows (a sequence whose
  // length P does not divide gets padding rows at the end, which no real
  // row attends to and which carry no loss), and both return the loss of the
  // whole sequence (summed over the group). Gradients accumulate this rank's
  // rows' share: the sum over the group's ranks (ZeRO-2's reduce-scatter) is
  // the sequence's gradient.
  void set_sequence_group(SequenceGroup* group) { group_ = group; }
  SequenceGroup* sequence_group() const { return group_; }
  // Bytes this engine has sent to the other ranks of its sequence group.
  int64_t sequence_bytes_sent() const { return sequence_bytes_sent_; }
  // Sums figures a TokenLoss gathered over this rank's rows into the whole
  // sequence's, over the sequence group (nothing to do without one).
  absl::Status SumOverSequenceGroup(double* values, int64_t count) {
    return group_ != nullptr && group_->size() > 1 ? group_->Sum(values, count) : absl::OkStatus();
  }

  // Asked before every sequence (Forward, ForwardBackward) and after every
  // layer of a backward: an error ends the pass at once with it. A run that
  // was cancelled answers CANCELLED, so that a step of a million sequences
  // (or one of a million tokens) ends within a sequence or a layer.
  using InterruptCheck = std::function<absl::Status()>;
  void set_interrupt(InterruptCheck check) { interrupt_ = std::move(check); }

  const EngineOptions& options() const { return options_; }
  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }

 private:
  absl::StatusOr<double> HeadForwardBackward(const ModelTensors& weights, const Tensor& hidden,
                                             const Tensor& targets, TokenLoss& loss,
                                             int64_t logits_chunk, Tensor* d_hidden,
                                             ModelTensors* grads, const Tensor& discard,
                                             int64_t first_row = 0);
  // Pieces every training pass shares (engine.cc): the gradient sink's
  // start of the backward (the LM head's groups), the frozen norms' sink of
  // a LoRA run (undefined without adapters), the end of layer l's backward,
  // and the embedding's gradient with its group's release.
  absl::Status BeginHeadGradients(ModelTensors& grads);
  absl::StatusOr<Tensor> FrozenNormGradient(int64_t lora_rank);
  absl::Status EndLayerBackward(int layer);
  absl::Status EmbeddingGradient(const Tensor& ids, const Tensor& d_hidden, ModelTensors& grads);
  // The passes of one rank of a sequence group (engine_ulysses.cc).
  absl::StatusOr<double> ShardedForwardBackward(const ModelTensors& weights, const Tensor& ids,
                                                const Tensor& targets, TokenLoss& loss,
                                                ModelTensors& grads, const Tensor* doc_offsets);
  absl::StatusOr<double> ShardedForward(const ModelTensors& weights, const Tensor& ids,
                                        const Tensor& targets, TokenLoss& loss,
                                        const Tensor* doc_offsets);

  const ModelConfig config_;
  const RopeTable rope_;  // computed once from config_
  Backend& backend_;
  EngineOptions options_;
  GradientSink* sink_ = nullptr;
  WeightSource* weight_source_ = nullptr;
  CheckpointStore* checkpoint_store_ = nullptr;
  InterruptCheck interrupt_;
  SequenceGroup* group_ = nullptr;
  int64_t sequence_bytes_sent_ = 0;

  absl::Status CheckInterrupt() const { return interrupt_ ? interrupt_() : absl::OkStatus(); }
};

}  // namespace sbp

namespace sbp {

// Model FLOPs of one forward + backward over a sequence of `tokens` (no
// recomputation counted): 6 * tokens * (matmul parameters incl. LM head)
// + 6 * L * Hq * d * tokens^2 for causal attention (forward 2 d T^2 per head
// over the causal half, backward twice that).
double TrainingFlops(const ModelConfig& config, int64_t tokens);

}  // namespace sbp
