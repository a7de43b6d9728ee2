#include "kernels/cpu/attention.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "common/check.h"
#include "kernels/cpu/attention_micro.h"
#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/op_checks.h"
#include "kernels/documents.h"

namespace sbp::cpu {
namespace {

using attention_internal::AccumulatePv;
using attention_internal::AddRows;
using attention_internal::FinishRows;
using attention_internal::KeyPanelFloats;
using attention_internal::kKeyPanel;
using attention_internal::kMicroRows;
using attention_internal::OnlineSoftmaxTile;
using attention_internal::PackKeyPanels;
using attention_internal::ProbabilitiesTile;
using attention_internal::RowDots;
using attention_internal::ScaleRows;
using attention_internal::ScoreRows;
using attention_internal::SoftmaxGradTile;
using attention_internal::Visible;

constexpr int64_t kTq = kAttentionTileQ;
constexpr int64_t kTk = kAttentionTileK;

struct Dims {
  int64_t tq, tk, hq, hkv, d, group;
  int64_t q_ld() const { return hq * d; }    // stride between rows of q, out, dq
  int64_t kv_ld() const { return hkv * d; }  // stride between rows of k, v, dk, dv
};

void CheckSameShape(const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) {
  CheckHostF32(t, name);
  CHECK(t.shape() == ref.shape()) << "attention: " << name << " " << ShapeString(t.shape())
                                  << " must have the shape of " << ref_name << " "
                                  << ShapeString(ref.shape());
}

Dims CheckInputs(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_offset) {
  CheckHostF32(q, "q");
  CheckHostF32(k, "k");
  CHECK_EQ(q.rank(), 3) << "attention: q must be [Tq, Hq, d], got " << ShapeString(q.shape());
  CHECK_EQ(k.rank(), 3) << "attention: k must be [Tk, Hkv, d], got " << ShapeString(k.shape());
  CheckSameShape(v, "v", k, "k");
  Dims dims{q.dim(0), k.dim(0), q.dim(1), k.dim(1), q.dim(2), 0};
  CHECK_EQ(k.dim(2), dims.d) << "attention: head_dim of q " << ShapeString(q.shape()) << " and k "
                             << ShapeString(k.shape()) << " differ";
  CHECK(dims.hkv > 0 && dims.hq % dims.hkv == 0)
      << "attention: query heads of q " << ShapeString(q.shape())
      << " must be a multiple of the KV heads of k " << ShapeString(k.shape());
  CHECK_GT(dims.d, 0) << "attention: empty head_dim in q " << ShapeString(q.shape());
  CHECK_GE(q_offset, 0) << "attention: negative q_offset";
  CHECK_GE(dims.tk, q_offset + dims.tq)
      << "attention: k " << ShapeString(k.shape()) << " must hold rows [0, q_offset + Tq) for q "
      << ShapeString(q.shape()) << " at q_offset " << q_offset;
  dims.group = dims.hq / dims.hkv;
  return dims;
}

void CheckLse(const Tensor& lse, const Dims& dims) {
  CheckHostF32(lse, "lse");
  CHECK(lse.shape() == (Shape{dims.tq, dims.hq}))
      << "attention: lse must be [Tq, Hq] = " << ShapeString({dims.tq, dims.hq}) << ", got "
      << ShapeString(lse.shape());
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Packed documents: per query row, the first key it sees (its document's
// start); empty without documents.
struct QueryDocuments {
  const int32_t* offsets = nullptr;
  int64_t count = 0;
  std::vector<int64_t> first_key;  // [Tq]
  const int64_t* first() const { return offsets != nullptr ? first_key.data() : nullptr; }
};

QueryDocuments DocumentsOf(const Tensor* doc_offsets, int64_t q_offset, int64_t tq) {
  QueryDocuments docs;
  if (doc_offsets == nullptr) return docs;
  CHECK(doc_offsets->device().is_cpu()) << "attention: document offsets must be on the cpu";
  CheckDocumentOffsets(*doc_offsets, q_offset + tq, /*values=*/true, "attention");
  docs.offsets = doc_offsets->data<int32_t>();
  docs.count = doc_offsets->dim(0);
  docs.first_key.resize(static_cast<size_t>(tq));
  for (int64_t i = 0; i < tq; ++i) {
    docs.first_key[i] = DocumentStart(docs.offsets, docs.count, q_offset + i);
  }
  return docs;
}

int Blas(int64_t n) { return static_cast<int>(n); }

// c [m, n] (ldc) = alpha op(a) op(b) + beta c, row-major.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, Blas(m), Blas(n), Blas(k), alpha, a, Blas(lda),
              b, Blas(ldb), beta, c, Blas(ldc));
}

// Waits until another thread has stored `value` into `ticket`.
void WaitForTicket(const std::atomic<int64_t>& ticket, int64_t value) {
  int spins = 0;
  while (ticket.load(std::memory_order_acquire) != value) {
    if (++spins > 64) std::this_thread::yield();
  }
}

// Rows of the diagonal (masked) part of a tile are processed in strips of
// this many rows (forward) or columns (backward), so that the work computed
// and then masked away is ~kStrip^2/2 per tile instead of kTq^2/2.
constexpr int64_t kStrip = 32;
static_assert(kTq <= kTk, "a diagonal strip of the forward is up to kTq keys wide");

std::atomic<AttentionKernel> attention_kernel{AttentionKernel::kAuto};

// The micro-kernels' score rows: kMicroRows rows of a key tile, plus the
// columns before an unaligned first key (up to kKeyPanel - 1) and after its
// last panel.
constexpr int64_t kMicroScoreLd = kTk + 2 * kKeyPanel;

// The forward pass for one (query head, query tile) at a time. With
// `key_panels` (the micro-kernel path: each KV head's keys packed by
// PackKeyPanels, `panel_stride` floats apart) the products are the
// micro-kernels', else sgemm.
class ForwardTile {
 public:
  ForwardTile(const Dims& dims, const float* q, const float* k, const float* v, float scale,
              const int64_t* first_key, const float* key_panels, int64_t panel_stride)
      : dims_(dims),
        q_(q),
        k_(k),
        v_(v),
        scale_(scale),
        first_key_(first_key),
        key_panels_(key_panels),
        panel_stride_(panel_stride),
        lo_(kTq),
        s_(key_panels != nullptr ? kMicroRows * kMicroScoreLd : kTq * kTk),
        acc_(kTq * dims.d),
        m_(kTq),
        l_(kTq),
        alpha_(kTq) {}

  // Query rows [i0, i0 + bq) at sequence position p0 = q_offset + i0, head h.
  void Run(int64_t h, int64_t i0, int64_t bq, int64_t p0, float* out, float* lse) {
    h_ = h;
    g_ = h / dims_.group;
    i0_ = i0;
    std::fill_n(m_.data(), bq, -std::numeric_limits<float>::infinity());
    std::fill_n(l_.data(), bq, 0.0f);
    // Keys [ks, p0), where ks is the first key of the tile's first row (0
    // without documents): tiles of keys before any row's document are
    // skipped; rows of later documents mask their start (lo_).
    const int64_t ks = first_key_ != nullptr ? first_key_[i0] : 0;
    for (int64_t j0 = ks; j0 < p0; j0 += kTk) {
      Block(0, bq, j0, std::min(kTk, p0 - j0), /*diag=*/kTk, /*first=*/j0 == ks);
    }
    // Keys [p0, p0 + bq): the causal triangle, in strips of rows; rows
    // [r0, r1) see keys up to p0 + r1 - 1, row r0 its first r0 + 1 of them
    // (keys from js on, when the strip's documents start later).
    for (int64_t r0 = 0; r0 < bq; r0 += kStrip) {
      const int64_t r1 = std::min(bq, r0 + kStrip);
      const int64_t js = first_key_ != nullptr ? std::max(p0, first_key_[i0 + r0]) : p0;
      Block(r0, r1, js, p0 + r1 - js, /*diag=*/p0 + r0 - js + 1, /*first=*/ks >= p0);
    }
    FinishRows(acc_.data(), dims_.d, bq, dims_.d, m_.data(), l_.data(), out, dims_.q_ld(), lse,
               dims_.hq);
  }

 private:
  // Tile rows [r0, r1) against keys [j0, j0 + bk) with mask `diag` (see
  // attention_tiles.h); `first` when these are the rows' first keys.
  void Block(int64_t r0, int64_t r1, int64_t j0, int64_t bk, int64_t diag, bool first) {
    if (key_panels_ != nullptr) return MicroBlock(r0, r1, j0, bk, diag, first);
    const int64_t rows = r1 - r0, d = dims_.d;
    const int64_t kv_off = (j0 * dims_.hkv + g_) * d;
    float* acc = acc_.data() + r0 * d;
    Gemm(false, true, rows, bk, d, scale_, q_ + ((i0_ + r0) * dims_.hq + h_) * d, dims_.q_ld(),
         k_ + kv_off, dims_.kv_ld(), 0.0f, s_.data(), kTk);
    const int64_t* lo = nullptr;
    if (first_key_ != nullptr) {
      for (int64_t r = 0; r < rows; ++r) lo_[r] = first_key_[i0_ + r0 + r] - j0;
      lo = lo_.data();
    }
    OnlineSoftmaxTile(s_.data(), kTk, rows, bk, diag, m_.data() + r0, l_.data() + r0,
                      alpha_.data() + r0, lo);
    if (!first) ScaleRows(acc, d, rows, d, alpha_.data() + r0);
    Gemm(false, false, rows, d, bk, 1.0f, s_.data(), kTk, v_ + kv_off, dims_.kv_ld(),
         first ? 0.0f : 1.0f, acc, d);
  }

  // Block with the micro-kernels, kMicroRows rows at a time: scores of the
  // keys the rows can see (the last row sees the most), online softmax, then
  // acc = alpha acc + P V in one pass (alpha fused into the kernel).
  void MicroBlock(int64_t r0, int64_t r1, int64_t j0, int64_t bk, int64_t diag, bool first) {
    const int64_t d = dims_.d;
    const float* panels = key_panels_ + g_ * panel_stride_;
    const float* v = v_ + (j0 * dims_.hkv + g_) * d;
    const int64_t lead = j0 % kKeyPanel;  // score columns before key j0
    const int64_t* lo = nullptr;
    if (first_key_ != nullptr) {
      for (int64_t r = r0; r < r1; ++r) lo_[r - r0] = first_key_[i0_ + r] - j0;
      lo = lo_.data();
    }
    for (int64_t a = r0; a < r1; a += kMicroRows) {
      const int64_t rows = std::min(kMicroRows, r1 - a);
      // Keys [j0, j0 + cols) cover what the strip's rows see (at least one
      // column, masked if need be, so that `first` still writes acc).
      const int64_t cols = std::max<int64_t>(1, Visible(diag, a + rows - 1 - r0, bk));
      const int64_t panels_used = (lead + cols + kKeyPanel - 1) / kKeyPanel;
      ScoreRows(q_ + ((i0_ + a) * dims_.hq + h_) * d, dims_.q_ld(), rows, d, panels, j0 / kKeyPanel,
                panels_used, scale_, s_.data(), kMicroScoreLd);
      float* p = s_.data() + lead;
      OnlineSoftmaxTile(p, kMicroScoreLd, rows, cols, diag + (a - r0), m_.data() + a, l_.data() + a,
                        alpha_.data() + a, lo != nullptr ? lo + (a - r0) : nullptr);
      AccumulatePv(p, kMicroScoreLd, 1, rows, cols, v, dims_.kv_ld(), d, alpha_.data() + a, first,
                   acc_.data() + a * d, d);
    }
  }

  const Dims& dims_;
  const float* q_;
  const float* k_;
  const float* v_;
  const float scale_;
  const int64_t* first_key_;  // [Tq] first key of each query row, or null
  const float* key_panels_;   // packed K^T per KV head (micro-kernels), or null
  const int64_t panel_stride_;
  std::vector<int64_t> lo_;  // [kTq] first visible column of a block's rows
  int64_t h_ = 0, g_ = 0, i0_ = 0;
  // s [kTq, kTk] scores then probabilities (micro-kernels: [kMicroRows,
  // kMicroScoreLd]); acc [kTq, d] unnormalised output; m, l, alpha [kTq]
  // running max, running sum of exp, rescale factor.
  std::vector<float> s_, acc_, m_, l_, alpha_;
};

struct BackwardArgs {
  const float *q, *k, *v, *dout, *lse, *delta;
  float *dk, *dv;
  float scale;
  const int64_t* first_key;  // [Tq] first key of each query row, or null
};

// The backward pass for one (KV head, key tile) against one query tile of
// one query head at a time: dk, dv rows of the key tile accumulate, the
// tile's share of dq goes to dq_part() for the caller to add. With
// `key_panels` and `value_panels` (K and V packed by PackKeyPanels,
// `panel_stride` floats per KV head) the products are the micro-kernels',
// else sgemm.
class BackwardTile {
 public:
  BackwardTile(const Dims& dims, const BackwardArgs& args, const float* key_panels,
               const float* value_panels, int64_t panel_stride)
      : dims_(dims),
        a_(args),
        key_panels_(key_panels),
        value_panels_(value_panels),
        panel_stride_(panel_stride),
        lo_(kTq),
        p_((kTq + kMicroRows) * kTk),
        ds_((kTq + kMicroRows) * kTk),
        dq_part_(kTq * dims.d) {}

  // Keys [j0, j0 + bk) of KV head h / group; query rows [i0, i0 + bq) of
  // head h at sequence positions from p0 = q_offset + i0 (p0 + bq > j0).
  void Run(int64_t h, int64_t i0, int64_t bq, int64_t p0, int64_t j0, int64_t bk) {
    h_ = h;
    i0_ = i0;
    j0_ = j0;
    const int64_t kv_off = (j0 * dims_.hkv + h / dims_.group) * dims_.d;
    k_ = a_.k + kv_off;
    v_ = a_.v + kv_off;
    dk_ = a_.dk + kv_off;
    dv_ = a_.dv + kv_off;
    if (key_panels_ != nullptr) return MicroRun(bq, p0, bk);
    if (p0 >= j0 + bk - 1) {  // every row sees every key
      Block(0, bq, 0, bk, /*diag=*/bk, /*dq_beta=*/0.0f);
      return;
    }
    // The tile crosses the diagonal: strips of key columns [c0, c1), seen by
    // rows r >= j0 + c0 - p0. Strip 0 reaches the most rows; rows above it
    // see no key of the tile.
    const int64_t top = std::max<int64_t>(0, j0 - p0);
    std::fill_n(dq_part_.data(), top * dims_.d, 0.0f);
    for (int64_t c0 = 0; c0 < bk; c0 += kStrip) {
      const int64_t r0 = std::max<int64_t>(0, j0 + c0 - p0);
      if (r0 >= bq) break;
      Block(r0, bq, c0, std::min(bk, c0 + kStrip), /*diag=*/p0 + r0 - (j0 + c0) + 1,
            /*dq_beta=*/c0 == 0 ? 0.0f : 1.0f);
    }
  }

  // [bq, d]: scale * dS k for the last Run.
  const float* dq_part() const { return dq_part_.data(); }

 private:
  // Query rows [r0, r1) of the tile against key columns [c0, c1).
  void Block(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t diag, float dq_beta) {
    const int64_t rows = r1 - r0, cols = c1 - c0, d = dims_.d;
    const int64_t q_ld = dims_.q_ld(), kv_ld = dims_.kv_ld();
    const int64_t row = (i0_ + r0) * dims_.hq + h_;  // flat (row, head) index
    const float* q = a_.q + row * d;
    const float* dout = a_.dout + row * d;
    const int64_t kv_off = c0 * kv_ld;
    float* p = p_.data();
    float* ds = ds_.data();
    // P = exp(scale q k^T - lse)
    Gemm(false, true, rows, cols, d, a_.scale, q, q_ld, k_ + kv_off, kv_ld, 0.0f, p, kTk);
    const int64_t* lo = nullptr;
    if (a_.first_key != nullptr) {
      for (int64_t r = 0; r < rows; ++r) lo_[r] = a_.first_key[i0_ + r0 + r] - (j0_ + c0);
      lo = lo_.data();
    }
    ProbabilitiesTile(p, kTk, rows, cols, diag, a_.lse + row, dims_.hq, lo);
    // dv += P^T dout
    Gemm(true, false, cols, d, rows, 1.0f, p, kTk, dout, q_ld, 1.0f, dv_ + kv_off, kv_ld);
    // dS = P * (dout v^T - delta)
    Gemm(false, true, rows, cols, d, 1.0f, dout, q_ld, v_ + kv_off, kv_ld, 0.0f, ds, kTk);
    SoftmaxGradTile(p, ds, kTk, rows, cols, a_.delta + row, dims_.hq);
    // dk += scale dS^T q
    Gemm(true, false, cols, d, rows, a_.scale, ds, kTk, q, q_ld, 1.0f, dk_ + kv_off, kv_ld);
    // dq_part (+)= scale dS k
    Gemm(false, false, rows, d, cols, a_.scale, ds, kTk, k_ + kv_off, kv_ld, dq_beta,
         dq_part_.data() + r0 * d, d);
  }

  // Run with the micro-kernels: strips of kMicroRows query rows against
  // every key of the tile they see (the last row sees the most): P from the
  // scores (K panels) and lse, dP = dout V^T (V panels), dS, and the strip's
  // dq = scale dS k; P and dS stay in p_/ds_ (zero where masked, and past the
  // keys a strip sees), then dv += P^T dout and dk += scale dS^T q, key
  // blocks of kMicroRows from the first row that sees them.
  void MicroRun(int64_t bq, int64_t p0, int64_t bk) {
    const int64_t d = dims_.d, q_ld = dims_.q_ld(), kv_ld = dims_.kv_ld(), hq = dims_.hq;
    const int64_t g = h_ / dims_.group;
    const float* key_panels = key_panels_ + g * panel_stride_;
    const float* value_panels = value_panels_ + g * panel_stride_;
    const int64_t diag = p0 - j0_ + 1;  // row r sees the tile's first diag + r keys
    // Rows above the tile's first key see none of it: their dq part is 0.
    const int64_t top = std::min(bq, std::max<int64_t>(0, j0_ - p0));
    std::fill_n(dq_part_.data(), top * d, 0.0f);
    for (int64_t a = top; a < bq; a += kMicroRows) {
      const int64_t rows = std::min(kMicroRows, bq - a);
      const int64_t cols = std::max<int64_t>(1, Visible(diag, a + rows - 1, bk));
      const int64_t panels = (cols + kKeyPanel - 1) / kKeyPanel;
      const int64_t written = std::min(bk, panels * kKeyPanel);
      const int64_t row = (i0_ + a) * hq + h_;  // flat (row, head) index
      float* p = p_.data() + a * kTk;
      float* ds = ds_.data() + a * kTk;
      const int64_t* lo = nullptr;
      if (a_.first_key != nullptr) {
        for (int64_t r = 0; r < rows; ++r) lo_[r] = a_.first_key[i0_ + a + r] - j0_;
        lo = lo_.data();
      }
      ScoreRows(a_.q + row * d, q_ld, rows, d, key_panels, j0_ / kKeyPanel, panels, a_.scale, p,
                kTk);
      ProbabilitiesTile(p, kTk, rows, bk, diag + a, a_.lse + row, hq, lo);
      ScoreRows(a_.dout + row * d, q_ld, rows, d, value_panels, j0_ / kKeyPanel, panels, 1.0f, ds,
                kTk);
      SoftmaxGradTile(p, ds, kTk, rows, written, a_.delta + row, hq, a_.scale);
      for (int64_t r = 0; r < rows; ++r) std::fill(ds + r * kTk + written, ds + r * kTk + bk, 0.0f);
      AccumulatePv(ds, kTk, 1, rows, cols, k_, kv_ld, d, kOnes, /*first=*/true,
                   dq_part_.data() + a * d, d);
    }
    for (int64_t c0 = 0; c0 < bk; c0 += kMicroRows) {
      const int64_t keys = std::min(kMicroRows, bk - c0);
      const int64_t first = std::max(top, c0 - diag + 1);  // the first row that sees key c0
      if (first >= bq) break;
      const int64_t row = (i0_ + first) * hq + h_;
      AccumulatePv(p_.data() + first * kTk + c0, 1, kTk, keys, bq - first, a_.dout + row * d, q_ld,
                   d, kOnes, /*first=*/false, dv_ + c0 * kv_ld, kv_ld);
      AccumulatePv(ds_.data() + first * kTk + c0, 1, kTk, keys, bq - first, a_.q + row * d, q_ld, d,
                   kOnes, /*first=*/false, dk_ + c0 * kv_ld, kv_ld);
    }
  }

  static constexpr float kOnes[kMicroRows] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

  const Dims& dims_;
  const BackwardArgs a_;
  const float* key_panels_;    // packed K^T per KV head (micro-kernels), or null
  const float* value_panels_;  // packed V^T per KV head (micro-kernels), or null
  const int64_t panel_stride_;
  int64_t h_ = 0, i0_ = 0, j0_ = 0;
  std::vector<int64_t> lo_;  // [kTq] first visible column of a block's rows
  const float* k_ = nullptr;
  const float* v_ = nullptr;
  float* dk_ = nullptr;
  float* dv_ = nullptr;
  // p [kTq, kTk] probabilities; ds [kTq, kTk] dP then dS (the micro-kernels
  // write kMicroRows - 1 spare rows past the last); dq_part [kTq, d].
  std::vector<float> p_, ds_, dq_part_;
};

}  // namespace

void SetAttentionKernel(AttentionKernel kernel) { attention_kernel.store(kernel); }

AttentionKernel AttentionKernelChoice() { return attention_kernel.load(); }

namespace {

bool UsesMicroKernel(int64_t d, attention_internal::MicroPass pass) {
  const AttentionKernel kernel = attention_kernel.load();
  if (kernel == AttentionKernel::kBlas) return false;
  if (!attention_internal::MicroKernelSupported() || d % 8 != 0) return false;
  if (kernel == AttentionKernel::kMicroKernel) return true;
  return attention_internal::MicroKernelPreferred(d, pass);
}

// Keys [0, keys) of every KV head of k ([Tk, Hkv, d]) as K^T panels
// (PackKeyPanels), KeyPanelFloats(keys, d) floats per head.
std::vector<float> PackPanels(const Dims& dims, const float* k, int64_t keys) {
  const int64_t count = CeilDiv(keys, kKeyPanel);
  const int64_t stride = KeyPanelFloats(keys, dims.d);
  std::vector<float> panels(static_cast<size_t>(stride * dims.hkv));
#pragma omp parallel for schedule(static)
  for (int64_t item = 0; item < dims.hkv * count; ++item) {
    const int64_t g = item / count, p = item % count;
    const int64_t j0 = p * kKeyPanel;
    PackKeyPanels(k + (j0 * dims.hkv + g) * dims.d, dims.kv_ld(), std::min(kKeyPanel, keys - j0),
                  dims.d, panels.data() + g * stride + p * kKeyPanel * dims.d);
  }
  return panels;
}

}  // namespace

bool AttentionForwardUsesMicroKernel(int64_t d) {
  return UsesMicroKernel(d, attention_internal::MicroPass::kForward);
}

bool AttentionBackwardUsesMicroKernel(int64_t d) {
  return UsesMicroKernel(d, attention_internal::MicroPass::kBackward);
}

void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_offset,
                      float scale, Tensor& out, Tensor* lse, const Tensor* doc_offsets) {
  const Dims dims = CheckInputs(q, k, v, q_offset);
  CheckSameShape(out, "out", q, "q");
  if (lse != nullptr) CheckLse(*lse, dims);
  if (dims.tq == 0) return;
  const QueryDocuments docs = DocumentsOf(doc_offsets, q_offset, dims.tq);

  float* op = out.data<float>();
  float* lp = lse != nullptr ? lse->data<float>() : nullptr;
  const int64_t n_qt = CeilDiv(dims.tq, kTq);
  const int64_t items = dims.hq * n_qt;

  // The micro-kernels read K as K^T panels: packed once per call for the
  // keys [0, q_offset + Tq) every query tile shares.
  std::vector<float> panels;
  int64_t panel_stride = 0;
  if (AttentionForwardUsesMicroKernel(dims.d)) {
    panels = PackPanels(dims, k.data<float>(), q_offset + dims.tq);
    panel_stride = KeyPanelFloats(q_offset + dims.tq, dims.d);
  }

#pragma omp parallel
  {
    ForwardTile tile(dims, q.data<float>(), k.data<float>(), v.data<float>(), scale, docs.first(),
                     panels.empty() ? nullptr : panels.data(), panel_stride);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t qt = n_qt - 1 - item / dims.hq;  // the longest rows (last tiles) first
      const int64_t h = item % dims.hq;
      const int64_t i0 = qt * kTq;
      const int64_t row = i0 * dims.hq + h;
      tile.Run(h, i0, std::min(kTq, dims.tq - i0), q_offset + i0, op + row * dims.d,
               lp != nullptr ? lp + row : nullptr);
    }
  }
}

void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& dout, const Tensor& lse, int64_t q_offset, float scale,
                       Tensor& dq, Tensor& dk, Tensor& dv, const Tensor* doc_offsets) {
  const Dims dims = CheckInputs(q, k, v, q_offset);
  CheckSameShape(out, "out", q, "q");
  CheckSameShape(dout, "dout", q, "q");
  CheckSameShape(dq, "dq", q, "q");
  CheckSameShape(dk, "dk", k, "k");
  CheckSameShape(dv, "dv", k, "k");
  CheckLse(lse, dims);
  if (dims.tq == 0) return;
  const QueryDocuments docs = DocumentsOf(doc_offsets, q_offset, dims.tq);

  const int64_t d = dims.d, hq = dims.hq, hkv = dims.hkv, q_ld = dims.q_ld();
  const int64_t n_qt = CeilDiv(dims.tq, kTq);
  const int64_t key_end = q_offset + dims.tq;
  const int64_t n_kt = CeilDiv(key_end, kTk);
  const int64_t items = n_kt * hkv;

  // delta [Tq, Hq] = rows of dout . out, once for all key tiles.
  std::vector<float> delta(dims.tq * hq);
  const float* op = out.data<float>();
  const float* dop = dout.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < dims.tq; ++i) {
    RowDots(dop + i * q_ld, op + i * q_ld, d, hq, d, delta.data() + i * hq);
  }
  const BackwardArgs args{
      q.data<float>(), k.data<float>(),  v.data<float>(),  dop,   lse.data<float>(),
      delta.data(),    dk.data<float>(), dv.data<float>(), scale, docs.first()};
  float* dqp = dq.data<float>();
  // The micro-kernels read K and V as panels, packed once per call.
  std::vector<float> key_panels, value_panels;
  int64_t panel_stride = 0;
  if (AttentionBackwardUsesMicroKernel(d)) {
    key_panels = PackPanels(dims, k.data<float>(), key_end);
    value_panels = PackPanels(dims, v.data<float>(), key_end);
    panel_stride = KeyPanelFloats(key_end, d);
  }

  // tickets[h * n_qt + qt]: the next key tile to add its part to that dq
  // tile. Key tiles F..J all contribute to a dq tile (F, J depend on the
  // tile; F = 0 without documents, else the tile holding the first row's
  // document start), so they take turns in key-tile order; F writes, the
  // rest add.
  std::vector<int64_t> first_kt(n_qt, 0);
  if (docs.first() != nullptr) {
    for (int64_t qt = 0; qt < n_qt; ++qt) first_kt[qt] = docs.first_key[qt * kTq] / kTk;
  }
  std::unique_ptr<std::atomic<int64_t>[]> tickets(new std::atomic<int64_t>[hq * n_qt]);
  for (int64_t i = 0; i < hq * n_qt; ++i) {
    tickets[i].store(first_kt[i % n_qt], std::memory_order_relaxed);
  }
  // Items are handed out strictly in order (kt-major), so the item a thread
  // waits for is always running or done: no deadlock.
  std::atomic<int64_t> next_item{0};

#pragma omp parallel
  {
    BackwardTile tile(dims, args, key_panels.empty() ? nullptr : key_panels.data(),
                      value_panels.empty() ? nullptr : value_panels.data(), panel_stride);
    for (;;) {
      const int64_t item = next_item.fetch_add(1, std::memory_order_relaxed);
      if (item >= items) break;
      const int64_t kt = item / hkv;
      const int64_t g = item % hkv;
      const int64_t j0 = kt * kTk;
      const int64_t bk = std::min(kTk, key_end - j0);
      // The first query tile that sees key j0; the last one that sees a key
      // of the tile (queries past the document of its last key see none).
      const int64_t first_qt = std::max<int64_t>(0, j0 - q_offset) / kTq;
      int64_t last_qt = n_qt - 1;
      if (docs.first() != nullptr) {
        const int64_t q_end = std::min(
            dims.tq, DocumentEnd(docs.offsets, docs.count, j0 + bk - 1, key_end) - q_offset);
        last_qt = q_end > 0 ? (q_end - 1) / kTq : -1;
      }
      for (int64_t h = g * dims.group; h < (g + 1) * dims.group; ++h) {
        for (int64_t qt = last_qt; qt >= first_qt; --qt) {
          const int64_t i0 = qt * kTq;
          const int64_t bq = std::min(kTq, dims.tq - i0);
          tile.Run(h, i0, bq, q_offset + i0, j0, bk);
          std::atomic<int64_t>& ticket = tickets[h * n_qt + qt];
          WaitForTicket(ticket, kt);
          AddRows(tile.dq_part(), d, dqp + (i0 * hq + h) * d, q_ld, bq, d,
                  /*accumulate=*/kt > first_kt[qt]);
          ticket.store(kt + 1, std::memory_order_release);
        }
      }
    }
  }
}

}  // namespace sbp::cpu
