#include "worker/engine/planner_terms.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/allocator.h"
#include "kernels/cuda_scratch_sizes.h"
#include "worker/engine/lora_store.h"

namespace sbp::planner {
namespace {

constexpr int64_t kF32 = 4;
constexpr int64_t kCudaAlignment = 256;  // CudaAllocator::kAlignment
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kCublasWorkspace = 32 * kMiB;
constexpr int64_t kCudaContext = 600 * kMiB;
constexpr int64_t kNcclBuffers = 256 * kMiB;
// Elements per host staging buffer of the offloaded optimizer's bf16 upload
// (optimizer_offload.cc).
constexpr int64_t kUploadChunkElements = int64_t{1} << 24;

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// A parameter group's flat buffer: at least one element, padded to `pad`.
int64_t GroupElements(int64_t numel, int64_t pad) {
  return RoundUp(std::max<int64_t>(numel, 1), pad);
}

std::string DTypeLabel(int64_t bytes) { return bytes == 2 ? "bf16" : "f32"; }

std::string Shape2(int64_t count, int64_t rows, int64_t cols, int64_t bytes) {
  return absl::StrCat(count == 1 ? "" : absl::StrCat(count, " x "), "[", rows, ", ", cols, "] ",
                      DTypeLabel(bytes));
}

// The trained parameters' groups (padded to N): the model's, or LoRA's
// adapter groups.
struct TrainedGroups {
  int64_t embed = 0, layer = 0, final = 0;
  int64_t total(int64_t L) const { return embed + L * layer + final; }
  int64_t largest() const { return std::max({embed, layer, final}); }
};

TrainedGroups Trained(const StepShape& s) {
  if (s.lora_r > 0) return {s.adapter_edge_group, s.adapter_layer_group, s.adapter_edge_group};
  return {s.embed_group, s.layer_group, s.final_group};
}

// Layer inputs the host and disk tiers keep off the device: hidden[0 .. L-2]
// (hidden[L-1] and hidden[L] never leave the two device slots: layer_inputs.h).
int64_t StoredLayerInputs(const StepShape& s) {
  return s.tier == CheckpointTier::kDevice ? 0 : std::max<int64_t>(s.L - 1, 0);
}

}  // namespace

LedgerTerm& Ledger::Term(absl::string_view name) {
  for (LedgerTerm& t : terms_) {
    if (t.name == name) return t;
  }
  terms_.push_back(LedgerTerm{std::string(name)});
  return terms_.back();
}

void Ledger::Add(absl::string_view name, int64_t count, int64_t elements, int64_t element_bytes) {
  LedgerTerm& t = Term(name);
  const int64_t bytes = elements * element_bytes;
  // A zero-byte request still takes one aligned block (CpuAllocator::RoundedSize).
  const int64_t rounded = bytes == 0 ? alignment_ : RoundUp(bytes, alignment_);
  t.bytes += count * bytes;
  t.rounded_bytes += count * rounded;
}

void Ledger::AddOutside(absl::string_view name, int64_t bytes, std::string detail) {
  LedgerTerm& t = Term(name);
  t.bytes += bytes;
  t.rounded_bytes += bytes;
  t.detail = std::move(detail);
  t.outside_allocator = true;
}

void Ledger::SetDetail(absl::string_view name, std::string detail) {
  Term(name).detail = std::move(detail);
}

void Ledger::Append(const Ledger& other) {
  for (const LedgerTerm& o : other.terms_) {
    LedgerTerm& t = Term(o.name);
    t.bytes += o.bytes;
    t.rounded_bytes += o.rounded_bytes;
    if (t.detail.empty()) t.detail = o.detail;
    t.outside_allocator = t.outside_allocator || o.outside_allocator;
  }
}

int64_t Ledger::total() const {
  int64_t sum = 0;
  for (const LedgerTerm& t : terms_) sum += t.rounded_bytes;
  return sum;
}

int64_t Ledger::outside_total() const {
  int64_t sum = 0;
  for (const LedgerTerm& t : terms_) sum += t.outside_allocator ? t.rounded_bytes : 0;
  return sum;
}

StepShape ShapeOf(const PlanRequest& r) {
  const ModelConfig& c = r.config;
  StepShape s;
  // Sequence parallelism: this rank's piece of the whole (rounded) sequence.
  s.P = std::max<int64_t>(r.sequence_parallel, 1);
  s.seq_len = r.seq_len;
  s.rollout_sequences = r.rollout_sequences;
  s.rollout_prompt = r.rollout_prompt_tokens;
  s.sequence = RoundUp(r.seq_len, s.P);
  s.T = s.sequence / s.P;
  s.stream = r.mode == BackwardMode::kStream;
  s.keep_all = r.mode == BackwardMode::kFull;
  // Engine::PlanChunks for a training step: whole sequences outside stream mode.
  s.C = s.LC = s.T;
  if (s.stream) {
    s.C = r.chunk_tokens > 0 ? std::min(r.chunk_tokens, s.T) : AutoChunkTokens(c, s.T);
    s.LC =
        r.logits_chunk_tokens > 0
            ? std::min(r.logits_chunk_tokens, s.T)
            : AutoLogitsChunkTokens(c, s.T, r.device, static_cast<int64_t>(DTypeSize(r.precision)));
  }
  s.C = std::max<int64_t>(s.C, 1);
  s.LC = std::max<int64_t>(s.LC, 1);
  s.L = c.num_hidden_layers;
  s.H = c.hidden_size;
  s.I = c.intermediate_size;
  s.V = c.vocab_size;
  s.q = c.q_dim();
  s.kv = c.kv_dim();
  s.Hq = c.num_attention_heads;
  s.Hkv = c.num_key_value_heads;
  s.d = c.head_dim;
  s.hq = s.Hq / s.P;
  s.hkv = std::max<int64_t>(1, s.Hkv / s.P);
  s.N = r.world_size;
  s.act_bytes = s.weight_bytes = DTypeSize(r.precision);
  s.gradient_bytes = DTypeSize(r.gradient_precision.value_or(r.precision));
  s.cuda = r.device == DeviceKind::kCuda;
  s.alignment = s.cuda ? kCudaAlignment : static_cast<int64_t>(CpuAllocator::kAlignment);
  s.embed_numel = TotalElements(EmbeddingParameterSpecs(c));
  s.layer_numel = TotalElements(LayerParameterSpecs(c, 0));
  s.final_numel = TotalElements(FinalParameterSpecs(c));
  s.embed_group = GroupElements(s.embed_numel, s.N);
  s.layer_group = GroupElements(s.layer_numel, s.N);
  s.final_group = GroupElements(s.final_numel, s.N);
  s.qk_norm = c.qk_norm;
  s.attention_bias = c.attention_bias;
  s.tied = c.tie_word_embeddings;
  s.reference = r.reference_model.value_or(r.objective != PlanObjective::kSft);
  s.objective_scratch = r.objective != PlanObjective::kSft;
  // Every rank of a group keeps the whole sequence's document offsets.
  s.documents = r.packed_documents > 1 ? std::min(r.packed_documents, r.seq_len) : 0;
  if (r.lora.enabled()) {
    s.lora_r = r.lora.r;
    for (const std::string& module : r.lora.target_modules) {
      const auto [in, out] = LoraModuleShape(c, module);
      s.adapter_layer_numel += r.lora.r * (in + out);
    }
    s.adapter_layer_group = GroupElements(s.adapter_layer_numel, s.N);
    s.adapter_edge_group = GroupElements(0, s.N);
  }
  s.tier = r.checkpoint_tier;
  s.optimizer_offload = r.optimizer_offload;
  s.optimizer_state = r.optimizer_state;
  s.shard_weights = r.shard_weights && s.N > 1;
  s.embedding_rows = EmbeddingRowCapacity(r);
  return s;
}

Ledger ModelState(const PlanRequest& r, const StepShape& s) {
  Ledger ledger(s.alignment);
  const int64_t P = s.embed_numel + s.L * s.layer_numel + s.final_numel;
  // One flat buffer per group: embed, L layers, final.
  auto groups = [&](absl::string_view name, int64_t copies, int64_t divisor, int64_t bytes) {
    ledger.Add(name, copies, s.embed_group / divisor, bytes);
    ledger.Add(name, copies * s.L, s.layer_group / divisor, bytes);
    ledger.Add(name, copies, s.final_group / divisor, bytes);
  };
  const std::string base_params = absl::StrCat(P, " parameters");
  const bool lora = s.lora_r > 0;
  if (s.shard_weights) {
    groups("weight_shards", 1, s.N, s.weight_bytes);
    ledger.SetDetail("weight_shards", absl::StrCat("1/", s.N, " of ", base_params, ", ",
                                                   DTypeLabel(s.weight_bytes), " (ZeRO-3)"));
    const int64_t slots = std::min<int64_t>(2, s.L);
    ledger.Add("gathered_layer_weights", slots, s.layer_group, s.weight_bytes);
    ledger.SetDetail("gathered_layer_weights",
                     absl::StrCat(slots, " x [", s.layer_group, "] ", DTypeLabel(s.weight_bytes),
                                  " (the layer read and the next)"));
  } else {
    groups("weights", 1, 1, s.weight_bytes);
    ledger.SetDetail("weights", absl::StrCat(base_params, ", ", DTypeLabel(s.weight_bytes),
                                             lora      ? ", frozen"
                                             : s.N > 1 ? absl::StrCat(", all-gathered in place as ",
                                                                      DTypeLabel(s.weight_bytes),
                                                                      " after a step")
                                                       : std::string()));
  }
  // The trained parameters: the model's groups, or LoRA's adapter groups.
  const int64_t embed_group = lora ? s.adapter_edge_group : s.embed_group;
  const int64_t layer_group = lora ? s.adapter_layer_group : s.layer_group;
  const int64_t final_group = lora ? s.adapter_edge_group : s.final_group;
  auto trained = [&](absl::string_view name, int64_t copies, int64_t divisor, int64_t bytes) {
    ledger.Add(name, copies, embed_group / divisor, bytes);
    ledger.Add(name, copies * s.L, layer_group / divisor, bytes);
    ledger.Add(name, copies, final_group / divisor, bytes);
  };
  const std::string params =
      lora ? absl::StrCat(s.L * s.adapter_layer_numel, " LoRA parameters (r ", s.lora_r, ")")
           : base_params;
  if (lora) {
    trained("adapter_weights", 1, 1, s.weight_bytes);
    ledger.SetDetail("adapter_weights", absl::StrCat(params, ", ", DTypeLabel(s.weight_bytes)));
  }
  // Adapters' gradients are f32 whatever the precision.
  const int64_t gradient_bytes = lora ? kF32 : s.gradient_bytes;
  const bool bf16 = s.weight_bytes == 2;
  // Optimizer offload: gradients, masters and moments live in host memory
  // (HostState); the device keeps the gradient buffers of ZeRO-2 below.
  const bool offload = s.optimizer_offload;
  if (!offload && s.N == 1 && s.embedding_rows > 0) {
    // The embedding's group gives way to the row set's room.
    ledger.Add("gradients", s.L, layer_group, gradient_bytes);
    ledger.Add("gradients", 1, final_group, gradient_bytes);
    ledger.SetDetail("gradients",
                     absl::StrCat(P - s.embed_numel, " parameters, ", DTypeLabel(gradient_bytes),
                                  " (all but the embedding)"));
    ledger.Add("embedding_row_gradient", 1, s.embedding_rows * s.H, kF32);
    ledger.SetDetail("embedding_row_gradient", absl::StrCat("[", s.embedding_rows, ", ", s.H,
                                                            "] f32 (the step's token rows)"));
  } else if (!offload && s.N == 1) {
    trained("gradients", 1, 1, gradient_bytes);
    ledger.SetDetail("gradients", absl::StrCat(params, ", ", DTypeLabel(gradient_bytes)));
  } else if (!offload) {
    trained("gradient_shards", 1, s.N, kF32);
    ledger.SetDetail("gradient_shards", absl::StrCat("1/", s.N, " of ", params, ", f32"));
  }
  if (r.optimizer_state && !offload) {
    const std::string share = s.N == 1 ? params : absl::StrCat("1/", s.N, " of ", params);
    if (bf16) {
      trained("master_weights", 1, s.N, kF32);
      ledger.SetDetail("master_weights", absl::StrCat(share, ", f32"));
    }
    trained("optimizer_moments", 2, s.N, kF32);
    ledger.SetDetail("optimizer_moments", absl::StrCat("AdamW m and v, ", share, ", f32"));
  }
  if (s.N > 1 || offload) {
    ledger.Add("gradient_cache", 2, layer_group, kF32);
    ledger.SetDetail("gradient_cache", absl::StrCat("2 x [", layer_group, "] f32 (one layer",
                                                    offload ? ", copied to host memory" : "", ")"));
    if (s.N > 1 && !s.cuda) {
      // Gloo's ring receives one chunk at a time from the allocator; NCCL
      // reduces in place within its own buffers (nccl_buffers).
      const int64_t largest = std::max({embed_group, layer_group, final_group});
      ledger.Add("comm_buffer", 1, largest / s.N, kF32);
      ledger.SetDetail("comm_buffer", absl::StrCat("[", largest / s.N, "] f32 (Gloo receive)"));
    }
  }
  if (s.reference) {
    ledger.Add("reference_weights", 1, GroupElements(s.embed_numel, 1), s.weight_bytes);
    ledger.Add("reference_weights", s.L, GroupElements(s.layer_numel, 1), s.weight_bytes);
    ledger.Add("reference_weights", 1, GroupElements(s.final_numel, 1), s.weight_bytes);
    ledger.SetDetail("reference_weights",
                     absl::StrCat(base_params, ", ", DTypeLabel(s.weight_bytes), " (frozen)"));
  }
  if (s.cuda) {
    ledger.Add("cublas_workspace", 1, kCublasWorkspace, 1);  // from the allocator
    ledger.SetDetail("cublas_workspace", "cuBLAS workspace (CudaBackendOptions)");
    ledger.AddOutside("cuda_context", kCudaContext, "CUDA context and kernel images (estimate)");
    if (s.N > 1) ledger.AddOutside("nccl_buffers", kNcclBuffers, "NCCL channels (estimate)");
  }
  return ledger;
}

absl::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kLmHead:
      return "lm_head";
    case Phase::kLayerBackward:
      return "layer_backward";
    case Phase::kEmbeddingBackward:
      return "embedding_backward";
    case Phase::kRollout:
      return "rollout";
  }
  return "?";
}

namespace {

// K/V of `rows` rows (the whole sequence; with sequence parallelism one
// chunk of the rank's own rows) for `sets` layers (KvBuffers::Allocate).
void AddKv(Ledger& ledger, const StepShape& s, int64_t sets, int64_t rows) {
  if (sets == 0) return;
  if (s.qk_norm) {
    ledger.Add("kv_buffers", sets, rows * s.kv, s.act_bytes);  // k before norm
    ledger.Add("kv_buffers", sets, rows * s.Hkv, kF32);        // k rstd
  }
  ledger.Add("kv_buffers", 2 * sets, rows * s.kv, s.act_bytes);  // K, V
  ledger.SetDetail("kv_buffers",
                   absl::StrCat(sets == 1 ? "" : absl::StrCat(sets, " x "), s.qk_norm ? "3" : "2",
                                " x [", rows, ", ", s.kv, "] ", DTypeLabel(s.act_bytes)));
}

// Sequence parallelism's K/V side, `sets` times: the gathered K and V of the
// rank's heads over the whole sequence, 2 x [sequence, hkv, d].
void AddGatheredKv(Ledger& ledger, const StepShape& s, int64_t sets) {
  if (sets == 0) return;
  const char* name = "sequence_parallel_kv";
  ledger.Add(name, 2 * sets, s.sequence * s.hkv * s.d, s.act_bytes);
  ledger.SetDetail(name, absl::StrCat(2 * sets, " x [", s.sequence, ", ", s.hkv, ", ", s.d, "] ",
                                      DTypeLabel(s.act_bytes), " (gathered K/V of ", s.hkv,
                                      " KV head", s.hkv == 1 ? "" : "s", ")"));
}

// Sequence parallelism's head-split attention of one chunk set, `sets`
// times: q and the output [C*P, hq, d] and the logsumexp [C*P, hq] f32.
void AddHeadSplitChunk(Ledger& ledger, const StepShape& s, int64_t sets) {
  if (sets == 0) return;
  const char* name = "sequence_parallel_chunk";
  const int64_t rows = s.C * s.P;
  ledger.Add(name, 2 * sets, rows * s.hq * s.d, s.act_bytes);  // q, attention output
  ledger.Add(name, sets, rows * s.hq, kF32);                   // lse
  ledger.SetDetail(name, absl::StrCat(sets == 1 ? "" : absl::StrCat(sets, " x "), "2 x [", rows,
                                      ", ", s.hq, ", ", s.d, "] ", DTypeLabel(s.act_bytes), " + [",
                                      rows, ", ", s.hq, "] f32 (head-split q, out, lse)"));
}

// Sequence parallelism's two all-to-all staging buffers of a pass, each
// ceil(S / 4) f32 with S = max(C Hq d e, 2 C P hkv d 4): a chunk's q or
// output blocks, or its K/V gradient blocks in f32.
int64_t StagingElements(const StepShape& s) {
  const int64_t bytes =
      std::max(s.C * s.Hq * s.d * s.act_bytes, 2 * s.C * s.P * s.hkv * s.d * kF32);
  return (bytes + kF32 - 1) / kF32;
}

// One ChunkActivations set of C rows allocated for backward, `sets` times.
void AddChunk(Ledger& ledger, const StepShape& s, int64_t sets) {
  if (sets == 0) return;
  const int64_t C = s.C, a = s.act_bytes;
  const char* name = "chunk_activations";
  ledger.Add(name, sets, C * s.H, a);  // xn
  ledger.Add(name, sets, C, kF32);     // x_rstd
  if (s.qk_norm) {
    ledger.Add(name, sets, C * s.q, a);      // q before norm
    ledger.Add(name, sets, C * s.Hq, kF32);  // q rstd
  }
  ledger.Add(name, sets, C * s.q, a);                             // q
  ledger.Add(name, sets, C * s.q, a);                             // attention output
  ledger.Add(name, sets, C * s.Hq, kF32);                         // lse
  ledger.Add(name, sets, C * s.H, a);                             // h
  ledger.Add(name, sets, C, kF32);                                // h_rstd
  ledger.Add(name, sets, C * s.H, a);                             // hn
  ledger.Add(name, 3 * sets, C * s.I, a);                         // gate, up, act
  ledger.Add(name, 2 * sets, C * s.q, a);                         // d_attn, dq
  if (s.lora_r > 0) ledger.Add(name, 3 * sets, C * s.lora_r, a);  // LoRA u, t, t2
  ledger.SetDetail(name,
                   absl::StrCat(sets == 1 ? "" : absl::StrCat(sets, " x "), C, " rows x (3 H + ",
                                s.qk_norm ? 5 : 4, " Hq*d + 3 I) ", DTypeLabel(a)));
}

}  // namespace

namespace {

// The CUDA kernels' transient scratch (CudaBackend::Scratch): taken by one op
// and freed when it returns, so a phase's peak holds its largest one.
//   layer_backward: the f32 dK/dV rows [C, kv] rounded to bf16 before they
//     meet the bf16 k/v projection weights (bf16 only; C = T outside stream
//     mode: 256 MiB at 128k for a kv of 1024), the attention delta [C, Hq]
//     f32, and the column partials of the RMSNorm (and q/k/v bias) weight
//     gradients (ColumnGroups(rows, cols) x cols f32);
//   lm_head: the cross-entropy row losses 2 (LC + 1) f32 and the final
//     norm's column partials;
//   embedding_backward: the token ids sorted into runs of equal ids, with
//     CUB's storage (EmbeddingBackwardScratchBound: 48 bytes a token + 4 MiB).
int64_t LargestKernelScratch(const StepShape& s, Phase phase) {
  auto column_partials = [](int64_t rows, int64_t cols) {
    return int64_t{cuda::ColumnGroups(rows, cols)} * cols * kF32;
  };
  int64_t largest = 0;
  auto consider = [&](int64_t bytes) { largest = std::max(largest, bytes); };
  if (phase == Phase::kLayerBackward) {
    if (s.act_bytes == 2) consider(s.C * s.kv * 2);
    // The attention delta: [C, Hq] f32; with sequence parallelism one block
    // of C rows and hq heads at a time.
    consider(s.C * s.hq * kF32);
    consider(column_partials(s.C, s.H));
    if (s.qk_norm) consider(column_partials(s.C * s.Hq, s.q / s.Hq));
    if (s.attention_bias) consider(column_partials(s.C, s.q));
  } else if (phase == Phase::kLmHead) {
    consider(2 * (s.LC + 1) * kF32);
    consider(column_partials(s.LC, s.H));
  } else {
    consider(cuda::EmbeddingBackwardScratchBound(s.T));  // the ids sorted into runs
  }
  return largest;
}

}  // namespace

namespace {

// A forward-only chunk of `rows` (ChunkActivations without the backward's
// buffers), as the decoder allocates it.
void AddForwardChunk(Ledger& ledger, const StepShape& s, int64_t rows, const char* name) {
  const int64_t a = s.act_bytes;
  ledger.Add(name, 1, rows * s.H, a);  // xn
  ledger.Add(name, 1, rows, kF32);     // x_rstd
  if (s.qk_norm) {
    ledger.Add(name, 1, rows * s.q, a);
    ledger.Add(name, 1, rows * s.Hq, kF32);
  }
  ledger.Add(name, 2, rows * s.q, a);      // q, attention output
  ledger.Add(name, 1, rows * s.Hq, kF32);  // lse
  ledger.Add(name, 2, rows * s.H, a);      // h, hn
  ledger.Add(name, 1, rows, kF32);         // h_rstd
  ledger.Add(name, 3, rows * s.I, a);      // gate, up, act
  if (s.lora_r > 0) ledger.Add(name, 1, rows * s.lora_r, a);
}

// Online GRPO's sampling phase (decode/generation.h): every completion's KV
// cache, then the larger working set of a prefill (hidden states [Tp, H] x 2,
// a chunk, its K scratch, the head's row) and of a decode step over all B
// completions (hidden states [B, H] x 2, a chunk of B rows, the new K/V
// rows, the head's [B, H] normed rows and [B, V] f32 logits).
Ledger RolloutActivations(const StepShape& s) {
  Ledger ledger(s.alignment);
  const int64_t B = s.rollout_sequences;
  ledger.Add("kv_cache", 2 * s.L * B, s.seq_len * s.kv, s.act_bytes);
  ledger.SetDetail(
      "kv_cache", absl::StrCat(2 * s.L * B, " x [", s.seq_len, ", ", s.kv, "] ",
                               DTypeLabel(s.act_bytes), " (", B, " completions decoded together)"));
  auto working_set = [&](int64_t rows, int64_t chunk, int64_t head_rows) {
    Ledger w(s.alignment);
    w.Add("decode_activations", 2, rows * s.H, s.act_bytes);
    AddForwardChunk(w, s, chunk, "decode_activations");
    if (s.qk_norm) {
      w.Add("decode_activations", 1, chunk * s.kv, s.act_bytes);
      w.Add("decode_activations", 1, chunk * s.Hkv, kF32);
    }
    if (rows == chunk) w.Add("decode_activations", 2, chunk * s.kv, s.act_bytes);  // new K, V
    w.Add("decode_activations", 1, head_rows * s.H, s.act_bytes);
    w.Add("decode_activations", 1, head_rows * s.V, kF32);
    if (s.act_bytes != kF32) w.Add("decode_activations", 1, head_rows * s.V, s.act_bytes);
    return w;
  };
  const int64_t prompt = std::max<int64_t>(1, s.rollout_prompt);
  Ledger prefill = working_set(prompt, std::min(prompt, s.C), 1);
  Ledger step = working_set(B, B, B);
  ledger.Append(prefill.total() >= step.total() ? prefill : step);
  ledger.SetDetail("decode_activations", prefill.total() >= step.total()
                                             ? absl::StrCat("a prefill of ", prompt, " tokens")
                                             : absl::StrCat("a decode step of ", B, " rows"));
  return ledger;
}

}  // namespace

Ledger PhaseActivations(const StepShape& s, Phase phase) {
  if (phase == Phase::kRollout) return RolloutActivations(s);
  Ledger ledger(s.alignment);
  if (s.tier == CheckpointTier::kDevice) {
    const int64_t layer_inputs = phase == Phase::kLmHead          ? s.L + 1
                                 : phase == Phase::kLayerBackward ? s.L
                                                                  : 1;
    ledger.Add("layer_inputs", layer_inputs, s.T * s.H, s.act_bytes);
    ledger.SetDetail("layer_inputs", Shape2(layer_inputs, s.T, s.H, s.act_bytes));
  } else if (phase != Phase::kEmbeddingBackward) {
    // The host and disk tiers: the forward writes into, and the backward
    // reads from, two device slots while the rest are off the device.
    ledger.Add("layer_input_slots", 2, s.T * s.H, s.act_bytes);
    ledger.SetDetail("layer_input_slots", absl::StrCat(Shape2(2, s.T, s.H, s.act_bytes), " (",
                                                       CheckpointTierName(s.tier), " tier)"));
  }
  // Full mode keeps every layer's set and frees each after its backward;
  // the others keep one set until the step ends.
  const int64_t sets = s.keep_all ? (phase == Phase::kEmbeddingBackward ? 0 : s.L) : 1;
  const bool sequence_parallel = s.P > 1;
  AddKv(ledger, s, sets, sequence_parallel ? s.C : s.T);
  if (sequence_parallel) AddGatheredKv(ledger, s, sets);
  AddChunk(ledger, s, sets);
  if (sequence_parallel) {
    AddHeadSplitChunk(ledger, s, sets);
    const int64_t staging = StagingElements(s);
    ledger.Add("sequence_parallel_staging", 2, staging, kF32);
    ledger.SetDetail("sequence_parallel_staging",
                     absl::StrCat("2 x [", staging, "] f32 (all-to-all blocks of a chunk)"));
  }
  ledger.Add("hidden_gradient", 1, s.T * s.H, s.act_bytes);
  ledger.SetDetail("hidden_gradient", Shape2(1, s.T, s.H, s.act_bytes));
  if (s.lora_r > 0) {  // the frozen norms' weight-gradient sink
    ledger.Add("frozen_norm_sink", 1, std::max(s.H, s.q / s.Hq), kF32);
    ledger.SetDetail("frozen_norm_sink", absl::StrCat("[", std::max(s.H, s.q / s.Hq), "] f32"));
  }
  if (phase == Phase::kLmHead && s.shard_weights) {
    ledger.Add("gathered_edge_weights", 1, s.final_group, s.weight_bytes);
    if (s.tied) ledger.Add("gathered_edge_weights", 1, s.embed_group, s.weight_bytes);
    ledger.SetDetail("gathered_edge_weights",
                     absl::StrCat("[", s.final_group, "]", s.tied ? " + [" : "",
                                  s.tied ? absl::StrCat(s.embed_group, "]") : "", " ",
                                  DTypeLabel(s.weight_bytes), " (the head's groups)"));
  }
  if (phase == Phase::kLmHead) {
    ledger.Add("head_temporaries", 1, s.LC * s.H, s.act_bytes);  // normed hidden
    ledger.Add("head_temporaries", 1, s.LC, kF32);               // rstd
    ledger.SetDetail("head_temporaries", Shape2(1, s.LC, s.H, s.act_bytes));
    ledger.Add("logits", 1, s.LC * s.V, s.act_bytes);
    ledger.SetDetail("logits", Shape2(1, s.LC, s.V, s.act_bytes));
    if (!s.stream) {  // the baselines keep the gradient apart, as autograd does
      ledger.Add("logits_gradient", 1, s.LC * s.V, s.act_bytes);
      ledger.SetDetail("logits_gradient", Shape2(1, s.LC, s.V, s.act_bytes));
    }
  } else if (sequence_parallel) {
    // dK/dV of the rank's heads over the whole sequence, accumulated over
    // chunks, and the local chunk's gradients they return to.
    ledger.Add("sequence_parallel_kv_grads", 2, s.sequence * s.hkv * s.d, kF32);
    ledger.SetDetail("sequence_parallel_kv_grads",
                     absl::StrCat("2 x [", s.sequence, ", ", s.hkv, ", ", s.d, "] f32"));
    ledger.Add("kv_grads", 2, s.C * s.kv, kF32);
    ledger.SetDetail("kv_grads", absl::StrCat("2 x [", s.C, ", ", s.kv, "] f32 (one chunk)"));
  } else {
    ledger.Add("kv_grads", 2, s.T * s.kv, kF32);  // accumulated over chunks in f32
    ledger.SetDetail("kv_grads", absl::StrCat("2 x [", s.T, ", ", s.kv, "] f32"));
  }
  if (s.objective_scratch) {  // LogProbScratch: log-probs, logsumexp, dlogprobs (whole sequence)
    ledger.Add("objective_scratch", 3, s.seq_len, kF32);
    ledger.SetDetail("objective_scratch", absl::StrCat("3 x [", s.seq_len, "] f32"));
  }
  if (s.sequence > s.seq_len) {
    // The group pads the sequence to a multiple of P (engine_ulysses.cc):
    // padded token ids, and document offsets with the padding as a document
    // of its own; on the CPU too, in the allocator.
    const int64_t offsets = (s.documents > 1 ? s.documents + 1 : 2) + 1;
    ledger.Add("sequence_parallel_padding", 1, s.sequence, 4);
    ledger.Add("sequence_parallel_padding", 1, offsets, 4);
    ledger.SetDetail("sequence_parallel_padding", absl::StrCat("[", s.sequence, "] + [", offsets,
                                                               "] i32 (padded ids, offsets)"));
  }
  if (s.cuda) {
    if (const int64_t scratch = LargestKernelScratch(s, phase); scratch > 0) {
      ledger.Add("kernel_scratch", 1, scratch, 1);
      ledger.SetDetail("kernel_scratch", "the largest CUDA op scratch of the phase");
    }
    ledger.Add("token_ids", 2, s.seq_len, 4);  // the whole sequence's, on every rank
    ledger.SetDetail("token_ids", absl::StrCat("2 x [", s.seq_len, "] i32"));
    if (s.documents > 1) {
      ledger.Add("document_offsets", 1, s.documents + 1, 4);
      ledger.SetDetail("document_offsets", absl::StrCat("[", s.documents + 1, "] i32"));
    }
  }
  if (s.N > 1 || s.optimizer_offload) {
    // With LoRA the sink hands out the adapter layout's (empty) edge groups.
    const int64_t final_group = s.lora_r > 0 ? s.adapter_edge_group : s.final_group;
    const int64_t embed_group = s.lora_r > 0 ? s.adapter_edge_group : s.embed_group;
    // Optimizer offload on one worker frees the head's buffer once its
    // download has had the first layer's backward to run in (at that
    // layer's Release: optimizer_offload.cc), so it is live in the
    // layer_backward phase too.
    const bool head_through_first_layer = s.optimizer_offload && s.N == 1;
    if (phase == Phase::kLmHead || (phase == Phase::kLayerBackward && head_through_first_layer)) {
      ledger.Add("head_gradient_buffer", 1, final_group, kF32);
      ledger.SetDetail("head_gradient_buffer", absl::StrCat("[", final_group, "] f32"));
    }
    if (phase == Phase::kEmbeddingBackward || s.tied) {
      ledger.Add("embedding_gradient_buffer", 1, embed_group, kF32);
      ledger.SetDetail("embedding_gradient_buffer", absl::StrCat("[", embed_group, "] f32"));
    }
  }
  return ledger;
}

Ledger HostState(const StepShape& s) {
  Ledger ledger(s.alignment);
  if (const int64_t stored = StoredLayerInputs(s); stored > 0) {
    if (s.tier == CheckpointTier::kHost) {
      ledger.Add("host_layer_inputs", stored, s.T * s.H, s.act_bytes);
      ledger.SetDetail("host_layer_inputs", absl::StrCat(Shape2(stored, s.T, s.H, s.act_bytes),
                                                         s.cuda ? " pinned" : ""));
    } else if (s.cuda) {  // the disk tier's bounce buffers between the slots and the file
      ledger.Add("disk_staging", 2, s.T * s.H, s.act_bytes);
      ledger.SetDetail("disk_staging", absl::StrCat(Shape2(2, s.T, s.H, s.act_bytes), " pinned"));
    }
  }
  if (s.optimizer_offload) {
    const TrainedGroups g = Trained(s);
    const std::string share = s.N == 1 ? "" : absl::StrCat("1/", s.N, " of ");
    const std::string params =
        s.lora_r > 0 ? absl::StrCat(share, s.L * s.adapter_layer_numel, " LoRA parameters (r ",
                                    s.lora_r, ")")
                     : absl::StrCat(share, s.embed_numel + s.L * s.layer_numel + s.final_numel,
                                    " parameters");
    auto trained = [&](absl::string_view name, int64_t copies) {
      ledger.Add(name, copies, g.embed / s.N, kF32);
      ledger.Add(name, copies * s.L, g.layer / s.N, kF32);
      ledger.Add(name, copies, g.final / s.N, kF32);
    };
    trained("host_gradients", 1);
    ledger.SetDetail("host_gradients", absl::StrCat(params, ", f32"));
    if (s.optimizer_state) {
      trained("host_master_weights", 1);
      ledger.SetDetail("host_master_weights", absl::StrCat(params, ", f32"));
      trained("host_optimizer_moments", 2);
      ledger.SetDetail("host_optimizer_moments", absl::StrCat("AdamW m and v, ", params, ", f32"));
    }
    // The compute copy's upload when it is not f32 (bf16): on one worker two
    // host staging buffers the masters are cast into in chunks of at most
    // kUploadChunkElements (optimizer_offload.cc); under ZeRO-2 one owned
    // shard at a time (zero2_state.cc), during the update.
    if (s.optimizer_state && s.weight_bytes != kF32) {
      const int64_t elements =
          s.N == 1 ? std::min(g.largest(), kUploadChunkElements) : g.largest() / s.N;
      const int64_t buffers = s.N == 1 ? 2 : 1;
      ledger.Add("host_weight_staging", buffers, elements, s.weight_bytes);
      ledger.SetDetail("host_weight_staging",
                       absl::StrCat(buffers == 1 ? "" : absl::StrCat(buffers, " x "), "[", elements,
                                    "] ", DTypeLabel(s.weight_bytes), s.cuda ? " pinned" : "",
                                    " (the compute copy's upload)"));
    }
  }
  return ledger;
}

int64_t DiskBytes(const StepShape& s) {
  if (s.tier != CheckpointTier::kDisk) return 0;
  return StoredLayerInputs(s) * s.T * s.H * s.act_bytes;
}

int64_t CheckpointCopyBytes(const StepShape& s) {
  return 2 * StoredLayerInputs(s) * s.T * s.H * s.act_bytes;
}

int64_t AllToAllBytes(const StepShape& s) {
  if (s.P <= 1) return 0;
  const int64_t e = s.act_bytes;
  // q out and the attention output back; K and V to their heads' owners.
  const int64_t queries = 2 * s.T * s.Hq * s.d * e;
  const int64_t keys_values = 2 * s.T * s.P * s.hkv * s.d * e;
  const int64_t forward = queries + keys_values;
  // dout out and dq back; the gathered K/V's f32 gradients back. Outside
  // full mode the backward recomputes K/V and each chunk's attention first.
  const int64_t backward =
      (s.keep_all ? 0 : forward) + queries + 2 * s.sequence * s.hkv * s.d * kF32;
  // Each exchange sends P equal blocks, one of them to the rank itself,
  // which does not leave it.
  return s.L * (forward + backward) / s.P * (s.P - 1);
}

int64_t OptimizerCopyBytes(const StepShape& s) {
  if (!s.optimizer_offload) return 0;
  const int64_t P = Trained(s).total(s.L);
  return P * kF32 + (s.optimizer_state ? P * s.weight_bytes : 0);
}

}  // namespace sbp::planner
