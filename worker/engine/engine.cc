#include "worker/engine/engine.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/embedding_rows.h"
#include "worker/engine/decoder_layer.h"
#include "worker/engine/engine_buffers.h"
#include "worker/engine/layer_buffers.h"
#include "worker/engine/layer_inputs.h"
#include "worker/engine/lora_store.h"

namespace sbp {
namespace {

using engine_internal::Make;
using engine_internal::MakeF32;
using engine_internal::NormGradOrDiscard;
using engine_internal::PassWeights;
using engine_internal::WithFrozenNorms;

void CheckSequence(const Tensor& ids, const Tensor& targets) {
  CHECK(ids.dtype() == DType::kI32 && targets.dtype() == DType::kI32);
  CHECK_EQ(ids.numel(), targets.numel());
}

}  // namespace

absl::string_view BackwardModeName(BackwardMode mode) {
  switch (mode) {
    case BackwardMode::kFull:
      return "full";
    case BackwardMode::kCheckpoint:
      return "checkpoint";
    case BackwardMode::kStream:
      return "stream";
  }
  return "?";
}

absl::StatusOr<BackwardMode> ParseBackwardMode(absl::string_view text) {
  if (text == "full") return BackwardMode::kFull;
  if (text == "checkpoint") return BackwardMode::kCheckpoint;
  if (text == "stream") return BackwardMode::kStream;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mode '", text, "' (expected stream, checkpoint or full)"));
}

int64_t AutoChunkTokens(const ModelConfig&, int64_t tokens) {
  return std::max<int64_t>(1, std::min<int64_t>(tokens, 1024));
}

int64_t AutoLogitsChunkTokens(const ModelConfig& config, int64_t tokens, DeviceKind device,
                              int64_t element_bytes) {
  const bool cuda = device == DeviceKind::kCuda;
  const int64_t granule = cuda ? 256 : 64;
  const int64_t preferred = cuda ? 4096 : 512;
  const int64_t max_bytes = cuda ? int64_t{2} << 30 : int64_t{512} << 20;
  const int64_t row_bytes =
      std::max<int64_t>(config.vocab_size, 1) * std::max<int64_t>(element_bytes, 1);
  const int64_t by_memory = max_bytes / row_bytes / granule * granule;
  const int64_t rows = std::max(granule, std::min(preferred, by_memory));
  return std::max<int64_t>(1, std::min(tokens, rows));
}

absl::Status CheckModelRunsOn(const ModelConfig& config, const Backend& backend) {
  absl::Status status = backend.CheckAttentionShape(config.head_dim, config.num_attention_heads);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("the model cannot run on ", DeviceName(backend.device()), ": ",
                                     status.message()));
  }
  return absl::OkStatus();
}

Engine::Engine(const ModelConfig& config, Backend& backend, EngineOptions options)
    : config_(config), rope_(config_.rope_table()), backend_(backend), options_(options) {}

Engine::ChunkPlan Engine::PlanChunks(int64_t tokens, bool training) const {
  ChunkPlan plan{tokens, tokens, tokens};
  const bool chunked = !training || options_.mode == BackwardMode::kStream;
  if (chunked) {
    plan.chunk = options_.chunk_tokens > 0 ? std::min(options_.chunk_tokens, tokens)
                                           : AutoChunkTokens(config_, tokens);
    plan.logits_chunk =
        options_.logits_chunk_tokens > 0
            ? std::min(options_.logits_chunk_tokens, tokens)
            : AutoLogitsChunkTokens(config_, tokens, backend_.device().kind,
                                    static_cast<int64_t>(DTypeSize(backend_.activation_dtype())));
  }
  plan.chunk = std::max<int64_t>(plan.chunk, 1);
  plan.logits_chunk = std::max<int64_t>(plan.logits_chunk, 1);
  return plan;
}

absl::StatusOr<double> Engine::HeadForwardBackward(const ModelTensors& weights,
                                                   const Tensor& hidden, const Tensor& targets,
                                                   TokenLoss& loss, int64_t logits_chunk,
                                                   Tensor* d_hidden, ModelTensors* grads,
                                                   const Tensor& discard, int64_t first_row) {
  Backend& b = backend_;
  const int64_t T = hidden.dim(0), H = config_.hidden_size, V = config_.vocab_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  ASSIGN_OR_RETURN(Tensor normed, Make(b, {logits_chunk, H}, "LM head normed hidden"));
  ASSIGN_OR_RETURN(Tensor rstd, MakeF32(b, {logits_chunk}, "LM head rstd"));
  ASSIGN_OR_RETURN(Tensor logits_buffer, Make(b, {logits_chunk, V}, "logits"));
  // The baselines hold the logits and their gradient as two T x V tensors, as
  // autograd does (PyTorch's cross-entropy is not in place); StreamBP
  // overwrites each logits chunk with its gradient.
  const bool separate_gradient = d_hidden != nullptr && options_.mode != BackwardMode::kStream;
  Tensor d_logits_buffer;
  if (separate_gradient) {
    ASSIGN_OR_RETURN(d_logits_buffer, Make(b, {logits_chunk, V}, "logits gradient"));
  }
  double total = 0;
  for (int64_t s = 0; s < T; s += logits_chunk) {
    const int64_t e = std::min(T, s + logits_chunk), n = e - s;
    Tensor x = hidden.Rows(s, e);
    Tensor fn = normed.Rows(0, n), r = rstd.Rows(0, n), logits = logits_buffer.Rows(0, n);
    b.RmsNormForward(x, weights.final_norm, eps, fn, &r);
    b.MatmulXWt(fn, weights.lm_head, logits, false);
    if (d_hidden == nullptr) {
      total += loss.Forward(b, logits, targets.Rows(s, e), first_row + s);
      continue;
    }
    Tensor d_logits = logits;
    if (separate_gradient) {
      d_logits = d_logits_buffer.Rows(0, n);
      b.Cast(logits, d_logits);
    }
    total += loss.ForwardBackward(b, d_logits, targets.Rows(s, e), first_row + s);
    if (grads->lm_head.defined()) b.MatmulAccumDyTX(d_logits, fn, grads->lm_head);
    Tensor& d_fn = fn;
    b.MatmulDyW(d_logits, weights.lm_head, d_fn, false);
    Tensor dx = d_hidden->Rows(s, e);
    Tensor d_norm = NormGradOrDiscard(grads->final_norm, discard, H);
    b.RmsNormBackward(x, weights.final_norm, r, d_fn, dx, d_norm);
  }
  return total;
}

absl::StatusOr<double> Engine::Forward(const ModelTensors& weights, const Tensor& ids,
                                       const Tensor& targets, TokenLoss& loss,
                                       const Tensor* doc_offsets) {
  CheckSequence(ids, targets);
  if (group_ != nullptr && group_->size() > 1) {
    return ShardedForward(weights, ids, targets, loss, doc_offsets);
  }
  RETURN_IF_ERROR(CheckInterrupt());
  Backend& b = backend_;
  const ChunkPlan plan = PlanChunks(ids.numel(), /*training=*/false);
  const int64_t T = plan.tokens, H = config_.hidden_size;
  DecoderLayer layer(config_, rope_, b);
  layer.set_documents(doc_offsets);
  PassWeights pass_weights(weight_source_, weights, config_);
  const ModelTensors& wt = pass_weights.get();
  // Two hidden-state buffers alternate between layer input and output.
  ASSIGN_OR_RETURN(Tensor x, Make(b, {T, H}, "hidden states"));
  ASSIGN_OR_RETURN(Tensor y, Make(b, {T, H}, "hidden states"));
  RETURN_IF_ERROR(pass_weights.UseEmbedding());
  b.EmbeddingForward(wt.embed, ids, x);
  RETURN_IF_ERROR(pass_weights.Done(0));
  {
    ASSIGN_OR_RETURN(KvBuffers kv, KvBuffers::Allocate(b, config_, T, "forward"));
    ASSIGN_OR_RETURN(ChunkActivations acts,
                     ChunkActivations::Allocate(b, config_, plan.chunk, false, "forward chunk",
                                                LoraRank(weights)));
    for (int l = 0; l < config_.num_hidden_layers; ++l) {
      RETURN_IF_ERROR(pass_weights.UseLayer(l, /*forward=*/true));
      const LayerWeights& w = wt.layers[l];
      for (int64_t s = 0; s < T; s += plan.chunk) {
        const int64_t e = std::min(T, s + plan.chunk);
        ChunkActivations a = acts.Rows(e - s);
        KvBuffers kv_rows = kv.Rows(s, e);
        layer.InputNorm(w, x.Rows(s, e), a);
        layer.KvForward(w, a, s, kv_rows);
        layer.ChunkForward(w, x.Rows(s, e), s, kv, a, y.Rows(s, e));
      }
      RETURN_IF_ERROR(pass_weights.DoneLayer(l));
      std::swap(x, y);
    }
  }
  RETURN_IF_ERROR(pass_weights.UseHead(/*next=*/-1));
  ASSIGN_OR_RETURN(const double total, HeadForwardBackward(wt, x, targets, loss, plan.logits_chunk,
                                                           nullptr, nullptr, Tensor()));
  RETURN_IF_ERROR(pass_weights.DoneHead());
  // An op that found no memory for its scratch did nothing: the loss is void.
  RETURN_IF_ERROR(b.TakeDeferredError());
  return total;
}

absl::StatusOr<double> Engine::ForwardBackward(const ModelTensors& weights, const Tensor& ids,
                                               const Tensor& targets, TokenLoss& loss,
                                               ModelTensors& grads, const Tensor* doc_offsets) {
  CheckSequence(ids, targets);
  if (group_ != nullptr && group_->size() > 1) {
    return ShardedForwardBackward(weights, ids, targets, loss, grads, doc_offsets);
  }
  RETURN_IF_ERROR(CheckInterrupt());
  Backend& b = backend_;
  const ChunkPlan plan = PlanChunks(ids.numel(), /*training=*/true);
  const int64_t T = plan.tokens, H = config_.hidden_size;
  const int L = static_cast<int>(config_.num_hidden_layers);
  const bool keep_all = options_.mode == BackwardMode::kFull;
  const int64_t lora_rank = LoraRank(weights);
  DecoderLayer layer(config_, rope_, b);
  layer.set_documents(doc_offsets);
  PassWeights pass_weights(weight_source_, weights, config_);
  const ModelTensors& wt = pass_weights.get();

  // Layer inputs (checkpoints): hidden.at(l) is the input of layer l,
  // hidden.at(L) the final hidden state, on the device or in the store's tier.
  ASSIGN_OR_RETURN(LayerInputs hidden, LayerInputs::Create(b, checkpoint_store_, L, T, H));
  // Full mode keeps K/V and activations of every layer; the others keep one
  // set and recompute.
  const int sets = keep_all ? L : 1;
  std::vector<KvBuffers> kv(sets);
  std::vector<ChunkActivations> acts(sets);
  for (int i = 0; i < sets; ++i) {
    ASSIGN_OR_RETURN(kv[i], KvBuffers::Allocate(b, config_, T, absl::StrCat("layer ", i)));
    ASSIGN_OR_RETURN(acts[i], ChunkActivations::Allocate(b, config_, plan.chunk, true,
                                                         absl::StrCat("layer ", i), lora_rank));
  }

  // Forward: K/V of a chunk, then its queries (keys up to the chunk end are
  // ready because chunks run in order).
  {
    RETURN_IF_ERROR(pass_weights.UseEmbedding());
    Tensor embedded = hidden.at(0);
    b.EmbeddingForward(wt.embed, ids, embedded);
    RETURN_IF_ERROR(pass_weights.Done(0));
  }
  for (int l = 0; l < L; ++l) {
    RETURN_IF_ERROR(pass_weights.UseLayer(l, /*forward=*/true));
    const LayerWeights& w = wt.layers[l];
    const int set = keep_all ? l : 0;
    RETURN_IF_ERROR(hidden.BeforeLayerForward(l));
    const Tensor& x = hidden.at(l);
    const Tensor& y = hidden.at(l + 1);
    for (int64_t s = 0; s < T; s += plan.chunk) {
      const int64_t e = std::min(T, s + plan.chunk);
      ChunkActivations a = acts[set].Rows(e - s);
      KvBuffers kv_rows = kv[set].Rows(s, e);
      layer.InputNorm(w, x.Rows(s, e), a);
      layer.KvForward(w, a, s, kv_rows);
      layer.ChunkForward(w, x.Rows(s, e), s, kv[set], a, y.Rows(s, e));
    }
    RETURN_IF_ERROR(pass_weights.DoneLayer(l));
  }

  // LM head: loss and dL/d(final hidden), chunk by chunk, into d_hidden.
  const int final_group = L + 1;
  RETURN_IF_ERROR(BeginHeadGradients(grads));
  ASSIGN_OR_RETURN(Tensor d_hidden, Make(b, {T, H}, "hidden-state gradient"));
  ASSIGN_OR_RETURN(const Tensor discard, FrozenNormGradient(lora_rank));
  RETURN_IF_ERROR(pass_weights.UseHead(/*next=*/L > 0 ? L : -1));
  ASSIGN_OR_RETURN(double total,
                   HeadForwardBackward(wt, hidden.at(L), targets, loss, plan.logits_chunk,
                                       &d_hidden, &grads, discard));
  RETURN_IF_ERROR(pass_weights.DoneHead());
  // Layer inputs above the one being differentiated are no longer needed.
  hidden.AfterHead();
  // Before a group's gradients leave (a reduce-scatter under ZeRO-2): an op
  // that found no memory for its scratch did nothing, so they are void.
  RETURN_IF_ERROR(b.TakeDeferredError());
  if (sink_ != nullptr) RETURN_IF_ERROR(sink_->Release(final_group));

  ASSIGN_OR_RETURN(KvGrads kv_grads, KvGrads::Allocate(b, config_, T));
  for (int l = L - 1; l >= 0; --l) {
    RETURN_IF_ERROR(pass_weights.UseLayer(l, /*forward=*/false));
    const LayerWeights& w = wt.layers[l];
    if (sink_ != nullptr) RETURN_IF_ERROR(sink_->Acquire(1 + l, grads));
    LayerWeights g = WithFrozenNorms(grads.layers[l], discard, config_);
    const int set = keep_all ? l : 0;
    RETURN_IF_ERROR(hidden.BeforeLayerBackward(l));
    const Tensor& x = hidden.at(l);
    if (!keep_all) {
      // Recompute K/V for the whole sequence once.
      for (int64_t s = 0; s < T; s += plan.chunk) {
        const int64_t e = std::min(T, s + plan.chunk);
        ChunkActivations a = acts[0].Rows(e - s);
        KvBuffers kv_rows = kv[0].Rows(s, e);
        layer.InputNorm(w, x.Rows(s, e), a);
        layer.KvForward(w, a, s, kv_rows);
      }
    }
    b.Fill(kv_grads.dk, 0.0f);
    b.Fill(kv_grads.dv, 0.0f);
    for (int64_t s = 0; s < T; s += plan.chunk) {
      const int64_t e = std::min(T, s + plan.chunk);
      ChunkActivations a = acts[set].Rows(e - s);
      if (!keep_all) {
        layer.InputNorm(w, x.Rows(s, e), a);
        layer.ChunkForward(w, x.Rows(s, e), s, kv[0], a, Tensor());
      }
      Tensor dy = d_hidden.Rows(s, e);
      layer.ChunkBackward(w, x.Rows(s, e), s, kv[set], a, kv_grads, dy, g);
    }
    for (int64_t s = 0; s < T; s += plan.chunk) {
      const int64_t e = std::min(T, s + plan.chunk);
      ChunkActivations a = acts[set].Rows(e - s);
      KvBuffers kv_rows = kv[set].Rows(s, e);
      KvGrads kv_grad_rows{kv_grads.dk.Rows(s, e), kv_grads.dv.Rows(s, e)};
      Tensor dx = d_hidden.Rows(s, e);
      layer.KvBackward(w, x.Rows(s, e), s, kv_rows, kv_grad_rows, a, dx, g);
    }
    if (keep_all) {
      kv[l] = KvBuffers();
      acts[l] = ChunkActivations();
    }
    hidden.AfterLayerBackward(l);
    RETURN_IF_ERROR(pass_weights.DoneLayer(l));
    RETURN_IF_ERROR(EndLayerBackward(l));
  }
  RETURN_IF_ERROR(EmbeddingGradient(ids, d_hidden, grads));
  return total;
}

absl::Status Engine::BeginHeadGradients(ModelTensors& grads) {
  if (sink_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(sink_->BeginPass());
  RETURN_IF_ERROR(sink_->Acquire(static_cast<int>(config_.num_hidden_layers) + 1, grads));
  if (config_.tie_word_embeddings) RETURN_IF_ERROR(sink_->Acquire(0, grads));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Engine::FrozenNormGradient(int64_t lora_rank) {
  if (lora_rank == 0) return Tensor();
  return MakeF32(backend_, {std::max(config_.hidden_size, config_.head_dim)},
                 "frozen norm gradient");
}

absl::Status Engine::EndLayerBackward(int layer) {
  RETURN_IF_ERROR(backend_.TakeDeferredError());
  RETURN_IF_ERROR(CheckInterrupt());
  return sink_ != nullptr ? sink_->Release(1 + layer) : absl::OkStatus();
}

absl::Status Engine::EmbeddingGradient(const Tensor& ids, const Tensor& d_hidden,
                                       ModelTensors& grads) {
  if (sink_ != nullptr && !config_.tie_word_embeddings) RETURN_IF_ERROR(sink_->Acquire(0, grads));
  if (grads.embed.defined()) {
    backend_.EmbeddingBackward(ids, d_hidden, grads.embed);
  } else if (grads.embed_rows != nullptr) {
    // The rows of the step's tokens only, summed in the dense kernel's order.
    CHECK(backend_.device().is_cpu()) << "a row-set embedding gradient needs the CPU backend";
    RETURN_IF_ERROR(grads.embed_rows->Accumulate(ids, d_hidden));
  }
  RETURN_IF_ERROR(backend_.TakeDeferredError());
  return sink_ != nullptr ? sink_->Release(0) : absl::OkStatus();
}

}  // namespace sbp

namespace sbp {

double TrainingFlops(const ModelConfig& c, int64_t tokens) {
  const double H = c.hidden_size, I = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim();
  const double per_layer = H * q + 2 * H * kv + q * H + 3 * H * I;
  const double matmul_params = c.num_hidden_layers * per_layer + c.vocab_size * H;
  const double T = static_cast<double>(tokens);
  return 6.0 * T * matmul_params +
         6.0 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * T * T;
}

}  // namespace sbp
