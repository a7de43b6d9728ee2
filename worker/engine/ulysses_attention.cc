#include "worker/engine/ulysses_attention.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sbp {
namespace {

Tensor FlatHeads(const Tensor& t) { return t.Reshape({t.dim(0), -1}); }

// The `shape` elements at element `offset` of block `i` of `blocks`
// [P, per_block] (a view; `blocks` keeps the memory).
Tensor Region(const Tensor& blocks, int64_t i, int64_t offset, Shape shape) {
  auto* base = static_cast<char*>(blocks.raw_data());
  const int64_t element =
      (i * blocks.dim(1) + offset) * static_cast<int64_t>(DTypeSize(blocks.dtype()));
  return Tensor::Wrap(base + element, std::move(shape), blocks.dtype(), blocks.device());
}

}  // namespace

int64_t UlyssesQueryHeads(const ModelConfig& config, int64_t group_size) {
  return config.num_attention_heads / std::max<int64_t>(group_size, 1);
}

int64_t UlyssesKvHeads(const ModelConfig& config, int64_t group_size) {
  return std::max<int64_t>(1, config.num_key_value_heads / std::max<int64_t>(group_size, 1));
}

int64_t UlyssesStagingBytes(const ModelConfig& config, int64_t group_size, int64_t chunk_rows,
                            int64_t activation_bytes) {
  const int64_t d = config.head_dim;
  const int64_t queries = chunk_rows * config.num_attention_heads * d * activation_bytes;
  const int64_t kv_grads = 2 * chunk_rows * group_size * UlyssesKvHeads(config, group_size) * d * 4;
  const int64_t bytes = std::max(queries, kv_grads);
  return (bytes + 3) / 4 * 4;
}

UlyssesAttention::UlyssesAttention(Backend& backend, const ModelConfig& config,
                                   SequenceGroup& group, int64_t local_rows)
    : backend_(backend),
      config_(config),
      group_(group),
      group_size_(group.size()),
      local_rows_(local_rows),
      first_row_(static_cast<int64_t>(group.position()) * local_rows),
      query_heads_(UlyssesQueryHeads(config, group.size())),
      kv_heads_(UlyssesKvHeads(config, group.size())) {
  const int64_t d = config.head_dim, hkv = config.num_key_value_heads;
  for (int j = 0; j < group_size_; ++j) {
    query_columns_.push_back(j * query_heads_ * d);
    // P <= Hkv: rank j holds KV heads [j hkv', (j + 1) hkv'); P > Hkv: the
    // one KV head its query heads read, j / (P / Hkv).
    const int64_t kv_head = group_size_ <= hkv ? j * kv_heads_ : j / (group_size_ / hkv);
    kv_columns_.push_back(kv_head * d);
  }
}

absl::StatusOr<std::unique_ptr<UlyssesAttention>> UlyssesAttention::Create(
    Backend& backend, const ModelConfig& config, SequenceGroup& group, int64_t local_rows,
    int64_t chunk_rows) {
  const int64_t p = group.size();
  const int64_t hq = config.num_attention_heads, hkv = config.num_key_value_heads;
  if (p < 1 || hq % p != 0 || (hkv % p != 0 && p % hkv != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence parallelism over ", p, " ranks needs a rank count that divides the ",
                     hq, " query heads and divides or is a multiple of the ", hkv, " KV heads"));
  }
  std::unique_ptr<UlyssesAttention> self(new UlyssesAttention(backend, config, group, local_rows));
  const int64_t bytes = UlyssesStagingBytes(
      config, p, chunk_rows, static_cast<int64_t>(DTypeSize(backend.activation_dtype())));
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(self->staging_[i],
                     Tensor::Empty(backend.allocator(), {bytes / 4}, DType::kF32,
                                   absl::StrCat("sequence-parallel staging ", i)));
  }
  return self;
}

absl::StatusOr<KvBuffers> UlyssesAttention::AllocateGatheredKv(Backend& backend,
                                                               const ModelConfig& config,
                                                               int64_t group_size, int64_t tokens,
                                                               const std::string& what) {
  const Shape shape = {tokens, UlyssesKvHeads(config, group_size), config.head_dim};
  KvBuffers kv;
  ASSIGN_OR_RETURN(kv.k, Tensor::Empty(backend.allocator(), shape, backend.activation_dtype(),
                                       absl::StrCat(what, ": gathered K")));
  ASSIGN_OR_RETURN(kv.v, Tensor::Empty(backend.allocator(), shape, backend.activation_dtype(),
                                       absl::StrCat(what, ": gathered V")));
  return kv;
}

absl::StatusOr<KvGrads> UlyssesAttention::AllocateGatheredKvGrads(Backend& backend,
                                                                  const ModelConfig& config,
                                                                  int64_t group_size,
                                                                  int64_t tokens) {
  const Shape shape = {tokens, UlyssesKvHeads(config, group_size), config.head_dim};
  KvGrads g;
  ASSIGN_OR_RETURN(g.dk, Tensor::Empty(backend.allocator(), shape, DType::kF32, "gathered dK"));
  ASSIGN_OR_RETURN(g.dv, Tensor::Empty(backend.allocator(), shape, DType::kF32, "gathered dV"));
  return g;
}

Tensor UlyssesAttention::Staging(int which, int64_t per_block, DType dtype) const {
  const Tensor& buffer = staging_[which];
  CHECK_LE(group_size_ * per_block * static_cast<int64_t>(DTypeSize(dtype)),
           static_cast<int64_t>(buffer.nbytes()));
  return Tensor::Wrap(buffer.raw_data(), {group_size_, per_block}, dtype, buffer.device());
}

void UlyssesAttention::Exchange(const Tensor& send, const Tensor& recv) {
  if (!error_.ok()) return;
  CHECK_EQ(send.nbytes(), recv.nbytes());
  const int64_t block = static_cast<int64_t>(send.nbytes()) / group_size_;
  error_ = group_.AllToAll(send.raw_data(), recv.raw_data(), block);
  if (error_.ok()) sent_bytes_ += block * (group_size_ - 1);
}

absl::Status UlyssesAttention::TakeError() {
  absl::Status status = error_;
  error_ = absl::OkStatus();
  return status;
}

void UlyssesAttention::ExchangeKv(const KvBuffers& local, int64_t s, KvBuffers& gathered) {
  Backend& b = backend_;
  const int64_t m = local.k.dim(0), w = kv_heads_ * config_.head_dim;
  const DType dtype = local.k.dtype();
  Tensor send = Staging(0, 2 * m * w, dtype), recv = Staging(1, 2 * m * w, dtype);
  b.CopyColumnBlocks(FlatHeads(local.k), send, kv_columns_, w, 0, /*to_blocks=*/true);
  b.CopyColumnBlocks(FlatHeads(local.v), send, kv_columns_, w, m * w, /*to_blocks=*/true);
  Exchange(send, recv);
  Tensor k = FlatHeads(gathered.k), v = FlatHeads(gathered.v);
  for (int i = 0; i < group_size_; ++i) {
    const int64_t row = i * local_rows_ + s;
    Tensor k_rows = k.Rows(row, row + m), v_rows = v.Rows(row, row + m);
    b.Copy(Region(recv, i, 0, {m, w}), k_rows);
    b.Copy(Region(recv, i, m * w, {m, w}), v_rows);
  }
}

void UlyssesAttention::Forward(ChunkActivations& a, const KvBuffers& gathered, int64_t begin,
                               float scale, const Tensor* docs) {
  Backend& b = backend_;
  const int64_t m = a.q.dim(0), s = begin - first_row_, d = config_.head_dim;
  const int64_t w = query_heads_ * d;
  const DType dtype = a.q.dtype();
  Tensor send = Staging(0, m * w, dtype);
  b.CopyColumnBlocks(FlatHeads(a.q), send, query_columns_, w, 0, /*to_blocks=*/true);
  Exchange(send, a.q_sp);
  if (!error_.ok()) return;
  for (int j = 0; j < group_size_; ++j) {
    Tensor lse = a.lse_sp.Rows(j * m, (j + 1) * m);
    Tensor out = a.out_sp.Rows(j * m, (j + 1) * m);
    b.AttentionForward(a.q_sp.Rows(j * m, (j + 1) * m), gathered.k, gathered.v, j * local_rows_ + s,
                       scale, out, &lse, docs);
  }
  Tensor back = Staging(1, m * w, dtype);
  Exchange(a.out_sp, back);
  b.CopyColumnBlocks(a.attn, back, query_columns_, w, 0, /*to_blocks=*/false);
}

void UlyssesAttention::Backward(ChunkActivations& a, const KvBuffers& gathered,
                                KvGrads& gathered_grads, int64_t begin, float scale,
                                const Tensor* docs) {
  Backend& b = backend_;
  const int64_t m = a.q.dim(0), s = begin - first_row_, d = config_.head_dim;
  const int64_t w = query_heads_ * d;
  const DType dtype = a.d_attn.dtype();
  Tensor send = Staging(0, m * w, dtype);
  b.CopyColumnBlocks(a.d_attn, send, query_columns_, w, 0, /*to_blocks=*/true);
  // The output gradient in the head-split layout, then dq into the first
  // buffer (its send is complete).
  Tensor d_out = Staging(1, m * w, dtype).Reshape({group_size_ * m, query_heads_, d});
  Exchange(send, d_out);
  if (!error_.ok()) return;
  Tensor dq = Staging(0, m * w, a.dq.dtype()).Reshape({group_size_ * m, query_heads_, d});
  for (int j = 0; j < group_size_; ++j) {
    Tensor dq_rows = dq.Rows(j * m, (j + 1) * m);
    b.AttentionBackward(a.q_sp.Rows(j * m, (j + 1) * m), gathered.k, gathered.v,
                        a.out_sp.Rows(j * m, (j + 1) * m), d_out.Rows(j * m, (j + 1) * m),
                        a.lse_sp.Rows(j * m, (j + 1) * m), j * local_rows_ + s, scale, dq_rows,
                        gathered_grads.dk, gathered_grads.dv, docs);
  }
  Tensor back = Staging(1, m * w, a.dq.dtype());
  Exchange(dq, back);
  b.CopyColumnBlocks(FlatHeads(a.dq), back, query_columns_, w, 0, /*to_blocks=*/false);
}

void UlyssesAttention::ReturnKvGrads(const KvGrads& gathered_grads, int64_t s, KvGrads& local) {
  Backend& b = backend_;
  const int64_t m = local.dk.dim(0), d = config_.head_dim, w = kv_heads_ * d;
  Tensor send = Staging(0, 2 * m * w, DType::kF32), recv = Staging(1, 2 * m * w, DType::kF32);
  Tensor dk = FlatHeads(gathered_grads.dk), dv = FlatHeads(gathered_grads.dv);
  for (int j = 0; j < group_size_; ++j) {
    const int64_t row = j * local_rows_ + s;
    Tensor k_part = Region(send, j, 0, {m, w}), v_part = Region(send, j, m * w, {m, w});
    b.Copy(dk.Rows(row, row + m), k_part);
    b.Copy(dv.Rows(row, row + m), v_part);
  }
  Exchange(send, recv);
  Tensor local_dk = FlatHeads(local.dk), local_dv = FlatHeads(local.dv);
  const int64_t hkv = config_.num_key_value_heads;
  if (group_size_ <= hkv) {
    b.CopyColumnBlocks(local_dk, recv, kv_columns_, w, 0, /*to_blocks=*/false);
    b.CopyColumnBlocks(local_dv, recv, kv_columns_, w, m * w, /*to_blocks=*/false);
    return;
  }
  // Replicated KV heads: ranks [g r, (g + 1) r) each hold a partial dK/dV of
  // head g (r = P / Hkv); sum them in rank order into the first one's block.
  const int64_t replicas = group_size_ / hkv;
  for (int64_t g = 0; g < hkv; ++g) {
    Tensor first = Region(recv, g * replicas, 0, {2 * m * w});
    for (int64_t i = g * replicas + 1; i < (g + 1) * replicas; ++i) {
      b.Axpy(1.0f, Region(recv, i, 0, {2 * m * w}), first);
    }
    Tensor block = Region(recv, g * replicas, 0, {1, 2 * m * w});
    b.CopyColumnBlocks(local_dk, block, {g * d}, w, 0, /*to_blocks=*/false);
    b.CopyColumnBlocks(local_dv, block, {g * d}, w, m * w, /*to_blocks=*/false);
  }
}

}  // namespace sbp
