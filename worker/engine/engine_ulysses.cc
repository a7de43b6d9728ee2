// The engine's passes on one rank of a sequence group (Ulysses sequence
// parallelism, ulysses_attention.h): the same StreamBP schedule as
// engine.cc over this rank's T / P rows, with the attention of each chunk
// step exchanged across the group and K/V gathered for this rank's heads.
//
// Memory (stream, per rank, n = T / P rows, c rows per chunk): layer inputs
// L x [n, H] (or two slots with a checkpoint store), d_hidden [n, H], the
// gathered K/V 2 x [T, hkv, d] and their f32 gradients, one chunk's local
// K/V and K/V gradients, the chunk activations with their head-split
// copies, and two staging buffers (UlyssesStagingBytes).
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/decoder_layer.h"
#include "worker/engine/engine.h"
#include "worker/engine/engine_buffers.h"
#include "worker/engine/layer_buffers.h"
#include "worker/engine/layer_inputs.h"
#include "worker/engine/lora_store.h"
#include "worker/engine/ulysses_attention.h"

namespace sbp {
namespace {

using engine_internal::Make;
using engine_internal::PassWeights;
using engine_internal::WithFrozenNorms;

// The sequence as the group runs it: its length rounded up to a multiple of
// P. Padding rows (token 0) form a document of their own at the end, so
// their positions restart and no real row attends to them.
struct GroupSequence {
  Tensor ids;          // [tokens]
  Tensor docs;         // undefined: one document
  int64_t tokens = 0;  // padded length
  int64_t real_tokens = 0;
  std::vector<int32_t> host_ids, host_docs;  // the padded copies' sources
  const Tensor* documents() const { return docs.defined() ? &docs : nullptr; }
};

absl::StatusOr<Tensor> Upload(Backend& b, std::vector<int32_t>& host, const std::string& what) {
  Tensor source = Tensor::Wrap(host.data(), {static_cast<int64_t>(host.size())}, DType::kI32);
  ASSIGN_OR_RETURN(Tensor device, Tensor::Empty(b.allocator(), source.shape(), DType::kI32, what));
  b.Copy(source, device);
  return device;
}

std::vector<int32_t> Download(Backend& b, const Tensor& t) {
  std::vector<int32_t> host(static_cast<size_t>(t.numel()));
  Tensor view = Tensor::Wrap(host.data(), t.shape(), DType::kI32);
  b.Copy(t, view);
  return host;
}

absl::StatusOr<GroupSequence> ForGroup(Backend& b, const Tensor& ids, const Tensor* docs,
                                       int group_size) {
  GroupSequence seq;
  seq.real_tokens = ids.numel();
  seq.tokens = (seq.real_tokens + group_size - 1) / group_size * group_size;
  if (seq.tokens == seq.real_tokens) {
    seq.ids = ids;
    if (docs != nullptr) seq.docs = *docs;
    return seq;
  }
  seq.host_ids = Download(b, ids);
  seq.host_ids.resize(static_cast<size_t>(seq.tokens), 0);
  seq.host_docs = docs != nullptr ? Download(b, *docs)
                                  : std::vector<int32_t>{0, static_cast<int32_t>(seq.real_tokens)};
  seq.host_docs.push_back(static_cast<int32_t>(seq.tokens));
  ASSIGN_OR_RETURN(seq.ids, Upload(b, seq.host_ids, "padded token ids"));
  ASSIGN_OR_RETURN(seq.docs, Upload(b, seq.host_docs, "padded document offsets"));
  return seq;
}

// What one pass of a rank works on: its n = T / P rows from `first`, of
// which `real` hold tokens (the rest is padding), its chunks and exchanges.
struct RankPass {
  GroupSequence seq;
  int64_t n = 0, first = 0, real = 0;
  Engine::ChunkPlan plan{};
  std::unique_ptr<UlyssesAttention> ulysses;
};

absl::StatusOr<RankPass> PrepareRankPass(const Engine& engine, SequenceGroup& group,
                                         const Tensor& ids, const Tensor* docs, bool training) {
  RankPass pass;
  ASSIGN_OR_RETURN(pass.seq, ForGroup(engine.backend(), ids, docs, group.size()));
  pass.n = pass.seq.tokens / group.size();
  pass.first = group.position() * pass.n;
  pass.real = std::clamp<int64_t>(pass.seq.real_tokens - pass.first, 0, pass.n);
  pass.plan = engine.PlanChunks(pass.n, training);
  ASSIGN_OR_RETURN(pass.ulysses, UlyssesAttention::Create(engine.backend(), engine.config(), group,
                                                          pass.n, pass.plan.chunk));
  return pass;
}

}  // namespace

absl::StatusOr<double> Engine::ShardedForward(const ModelTensors& weights, const Tensor& ids,
                                              const Tensor& targets, TokenLoss& loss,
                                              const Tensor* doc_offsets) {
  RETURN_IF_ERROR(CheckInterrupt());
  Backend& b = backend_;
  const int P = group_->size();
  ASSIGN_OR_RETURN(RankPass pass, PrepareRankPass(*this, *group_, ids, doc_offsets, false));
  const GroupSequence& seq = pass.seq;
  const int64_t n = pass.n, first = pass.first, real = pass.real, H = config_.hidden_size;
  const ChunkPlan& plan = pass.plan;
  UlyssesAttention* ulysses = pass.ulysses.get();
  DecoderLayer layer(config_, rope_, b);
  layer.set_documents(seq.documents());
  layer.set_sequence_parallel(ulysses);
  PassWeights pass_weights(weight_source_, weights, config_);
  const ModelTensors& wt = pass_weights.get();
  ASSIGN_OR_RETURN(Tensor x, Make(b, {n, H}, "hidden states"));
  ASSIGN_OR_RETURN(Tensor y, Make(b, {n, H}, "hidden states"));
  RETURN_IF_ERROR(pass_weights.UseEmbedding());
  b.EmbeddingForward(wt.embed, seq.ids.Rows(first, first + n), x);
  RETURN_IF_ERROR(pass_weights.Done(0));
  {
    ASSIGN_OR_RETURN(KvBuffers local_kv, KvBuffers::Allocate(b, config_, plan.chunk, "forward"));
    ASSIGN_OR_RETURN(KvBuffers kv,
                     UlyssesAttention::AllocateGatheredKv(b, config_, P, seq.tokens, "forward"));
    ASSIGN_OR_RETURN(ChunkActivations acts,
                     ChunkActivations::Allocate(b, config_, plan.chunk, false, "forward chunk",
                                                LoraRank(weights), P));
    for (int l = 0; l < config_.num_hidden_layers; ++l) {
      RETURN_IF_ERROR(pass_weights.UseLayer(l, /*forward=*/true));
      const LayerWeights& w = wt.layers[l];
      for (int64_t s = 0; s < n; s += plan.chunk) {
        const int64_t e = std::min(n, s + plan.chunk);
        ChunkActivations a = acts.Rows(e - s);
        KvBuffers local = local_kv.Rows(0, e - s);
        layer.InputNorm(w, x.Rows(s, e), a);
        layer.KvForward(w, a, first + s, local);
        ulysses->ExchangeKv(local, s, kv);
      }
      for (int64_t s = 0; s < n; s += plan.chunk) {
        const int64_t e = std::min(n, s + plan.chunk);
        ChunkActivations a = acts.Rows(e - s);
        layer.InputNorm(w, x.Rows(s, e), a);
        layer.ChunkForward(w, x.Rows(s, e), first + s, kv, a, y.Rows(s, e));
      }
      RETURN_IF_ERROR(ulysses->TakeError());
      RETURN_IF_ERROR(pass_weights.DoneLayer(l));
      std::swap(x, y);
    }
  }
  RETURN_IF_ERROR(pass_weights.UseHead(/*next=*/-1));
  ASSIGN_OR_RETURN(double total,
                   HeadForwardBackward(wt, x.Rows(0, real), targets.Rows(first, first + real), loss,
                                       plan.logits_chunk, nullptr, nullptr, Tensor(), first));
  RETURN_IF_ERROR(pass_weights.DoneHead());
  RETURN_IF_ERROR(b.TakeDeferredError());
  sequence_bytes_sent_ += ulysses->sent_bytes();
  RETURN_IF_ERROR(group_->Sum(&total, 1));
  return total;
}

absl::StatusOr<double> Engine::ShardedForwardBackward(const ModelTensors& weights,
                                                      const Tensor& ids, const Tensor& targets,
                                                      TokenLoss& loss, ModelTensors& grads,
                                                      const Tensor* doc_offsets) {
  RETURN_IF_ERROR(CheckInterrupt());
  Backend& b = backend_;
  const int P = group_->size();
  ASSIGN_OR_RETURN(RankPass pass, PrepareRankPass(*this, *group_, ids, doc_offsets, true));
  const GroupSequence& seq = pass.seq;
  const int64_t n = pass.n, first = pass.first, real = pass.real, H = config_.hidden_size;
  const ChunkPlan& plan = pass.plan;
  UlyssesAttention* ulysses = pass.ulysses.get();
  const int L = static_cast<int>(config_.num_hidden_layers);
  const bool keep_all = options_.mode == BackwardMode::kFull;
  const int64_t lora_rank = LoraRank(weights);
  const int64_t chunks = (n + plan.chunk - 1) / plan.chunk;
  const Tensor local_ids = seq.ids.Rows(first, first + n);
  DecoderLayer layer(config_, rope_, b);
  layer.set_documents(seq.documents());
  layer.set_sequence_parallel(ulysses);
  PassWeights pass_weights(weight_source_, weights, config_);
  const ModelTensors& wt = pass_weights.get();

  ASSIGN_OR_RETURN(LayerInputs hidden, LayerInputs::Create(b, checkpoint_store_, L, n, H));
  // Full mode keeps every layer's K/V and activations (its one chunk is all
  // n rows); the others keep one set and recompute.
  const int sets = keep_all ? L : 1;
  std::vector<KvBuffers> local_kv(sets), kv(sets);
  std::vector<ChunkActivations> acts(sets);
  for (int i = 0; i < sets; ++i) {
    const std::string what = absl::StrCat("layer ", i);
    ASSIGN_OR_RETURN(local_kv[i], KvBuffers::Allocate(b, config_, plan.chunk, what));
    ASSIGN_OR_RETURN(kv[i], UlyssesAttention::AllocateGatheredKv(b, config_, P, seq.tokens, what));
    ASSIGN_OR_RETURN(acts[i],
                     ChunkActivations::Allocate(b, config_, plan.chunk, true, what, lora_rank, P));
  }
  // K/V of this rank's rows, chunk by chunk, to every rank of the group.
  auto gather_kv = [&](const LayerWeights& w, const Tensor& x, int set) {
    for (int64_t s = 0; s < n; s += plan.chunk) {
      const int64_t e = std::min(n, s + plan.chunk);
      ChunkActivations a = acts[set].Rows(e - s);
      KvBuffers local = local_kv[set].Rows(0, e - s);
      layer.InputNorm(w, x.Rows(s, e), a);
      layer.KvForward(w, a, first + s, local);
      ulysses->ExchangeKv(local, s, kv[set]);
    }
  };

  {
    RETURN_IF_ERROR(pass_weights.UseEmbedding());
    Tensor embedded = hidden.at(0);
    b.EmbeddingForward(wt.embed, local_ids, embedded);
    RETURN_IF_ERROR(pass_weights.Done(0));
  }
  for (int l = 0; l < L; ++l) {
    RETURN_IF_ERROR(pass_weights.UseLayer(l, /*forward=*/true));
    const LayerWeights& w = wt.layers[l];
    const int set = keep_all ? l : 0;
    RETURN_IF_ERROR(hidden.BeforeLayerForward(l));
    const Tensor& x = hidden.at(l);
    const Tensor& y = hidden.at(l + 1);
    gather_kv(w, x, set);
    for (int64_t s = 0; s < n; s += plan.chunk) {
      const int64_t e = std::min(n, s + plan.chunk);
      ChunkActivations a = acts[set].Rows(e - s);
      layer.InputNorm(w, x.Rows(s, e), a);
      layer.ChunkForward(w, x.Rows(s, e), first + s, kv[set], a, y.Rows(s, e));
    }
    RETURN_IF_ERROR(ulysses->TakeError());
    RETURN_IF_ERROR(pass_weights.DoneLayer(l));
  }

  const int final_group = L + 1;
  RETURN_IF_ERROR(BeginHeadGradients(grads));
  ASSIGN_OR_RETURN(Tensor d_hidden, Make(b, {n, H}, "hidden-state gradient"));
  ASSIGN_OR_RETURN(const Tensor discard, FrozenNormGradient(lora_rank));
  // Padding rows carry no loss: their gradient is zero.
  if (real < n) {
    Tensor padding = d_hidden.Rows(real, n);
    b.Fill(padding, 0.0f);
  }
  Tensor d_real = d_hidden.Rows(0, real);
  RETURN_IF_ERROR(pass_weights.UseHead(/*next=*/L > 0 ? L : -1));
  ASSIGN_OR_RETURN(
      double total,
      HeadForwardBackward(wt, hidden.at(L).Rows(0, real), targets.Rows(first, first + real), loss,
                          plan.logits_chunk, &d_real, &grads, discard, first));
  RETURN_IF_ERROR(pass_weights.DoneHead());
  hidden.AfterHead();
  RETURN_IF_ERROR(b.TakeDeferredError());
  if (sink_ != nullptr) RETURN_IF_ERROR(sink_->Release(final_group));

  ASSIGN_OR_RETURN(KvGrads kv_grads,
                   UlyssesAttention::AllocateGatheredKvGrads(b, config_, P, seq.tokens));
  ASSIGN_OR_RETURN(KvGrads local_grads, KvGrads::Allocate(b, config_, plan.chunk));
  for (int l = L - 1; l >= 0; --l) {
    RETURN_IF_ERROR(pass_weights.UseLayer(l, /*forward=*/false));
    const LayerWeights& w = wt.layers[l];
    if (sink_ != nullptr) RETURN_IF_ERROR(sink_->Acquire(1 + l, grads));
    LayerWeights g = WithFrozenNorms(grads.layers[l], discard, config_);
    const int set = keep_all ? l : 0;
    RETURN_IF_ERROR(hidden.BeforeLayerBackward(l));
    const Tensor& x = hidden.at(l);
    if (!keep_all) gather_kv(w, x, 0);
    b.Fill(kv_grads.dk, 0.0f);
    b.Fill(kv_grads.dv, 0.0f);
    for (int64_t s = 0; s < n; s += plan.chunk) {
      const int64_t e = std::min(n, s + plan.chunk);
      ChunkActivations a = acts[set].Rows(e - s);
      if (!keep_all) {
        layer.InputNorm(w, x.Rows(s, e), a);
        layer.ChunkForward(w, x.Rows(s, e), first + s, kv[0], a, Tensor());
      }
      Tensor dy = d_hidden.Rows(s, e);
      layer.ChunkBackward(w, x.Rows(s, e), first + s, kv[set], a, kv_grads, dy, g);
    }
    // The finished dK/dV of each chunk step back to its rows' owner, then
    // through this rank's k/v projections. The chunk's local K/V (k_pre,
    // k_rstd) are recomputed unless the one chunk's are still there.
    for (int64_t s = 0; s < n; s += plan.chunk) {
      const int64_t e = std::min(n, s + plan.chunk);
      ChunkActivations a = acts[set].Rows(e - s);
      KvBuffers local = local_kv[set].Rows(0, e - s);
      if (!keep_all && chunks > 1) {
        layer.InputNorm(w, x.Rows(s, e), a);
        layer.KvForward(w, a, first + s, local);
      }
      KvGrads local_rows{local_grads.dk.Rows(0, e - s), local_grads.dv.Rows(0, e - s)};
      ulysses->ReturnKvGrads(kv_grads, s, local_rows);
      Tensor dx = d_hidden.Rows(s, e);
      layer.KvBackward(w, x.Rows(s, e), first + s, local, local_rows, a, dx, g);
    }
    RETURN_IF_ERROR(ulysses->TakeError());
    if (keep_all) {
      local_kv[l] = KvBuffers();
      kv[l] = KvBuffers();
      acts[l] = ChunkActivations();
    }
    hidden.AfterLayerBackward(l);
    RETURN_IF_ERROR(pass_weights.DoneLayer(l));
    RETURN_IF_ERROR(EndLayerBackward(l));
  }
  RETURN_IF_ERROR(EmbeddingGradient(local_ids, d_hidden, grads));
  sequence_bytes_sent_ += ulysses->sent_bytes();
  RETURN_IF_ERROR(group_->Sum(&total, 1));
  return total;
}

}  // namespace sbp
