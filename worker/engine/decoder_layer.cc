#include "worker/engine/decoder_layer.h"

#include <cmath>

#include "common/check.h"
#include "worker/engine/lora_linear.h"
#include "worker/engine/ulysses_attention.h"

namespace sbp {
namespace {

// [n, heads, d] -> [n, heads*d] (and back): the same contiguous rows.
Tensor Flat(const Tensor& t) { return t.Reshape({t.dim(0), -1}); }
Tensor Heads(const Tensor& t, int64_t heads, int64_t d) { return t.Reshape({t.dim(0), heads, d}); }

// dw += dy^T x, unless the weight is frozen (a LoRA run: no gradient).
void AccumWeightGrad(Backend& b, const Tensor& dy, const Tensor& x, Tensor& dw) {
  if (dw.defined()) b.MatmulAccumDyTX(dy, x, dw);
}

}  // namespace

DecoderLayer::DecoderLayer(const ModelConfig& config, const RopeTable& rope, Backend& backend)
    : config_(config),
      rope_(rope),
      backend_(backend),
      eps_(static_cast<float>(config.rms_norm_eps)),
      scale_(static_cast<float>(1.0 / std::sqrt(static_cast<double>(config.head_dim)))) {}

void DecoderLayer::InputNorm(const LayerWeights& w, const Tensor& x_rows, ChunkActivations& a) {
  backend_.RmsNormForward(x_rows, w.input_norm, eps_, a.xn, &a.x_rstd);
}

void DecoderLayer::KvForward(const LayerWeights& w, const ChunkActivations& a, int64_t begin,
                             KvBuffers& kv_rows) {
  ProjectKv(w, a, kv_rows);
  backend_.RopeForward(kv_rows.k, begin, rope_, docs_);
}

void DecoderLayer::ProjectKv(const LayerWeights& w, const ChunkActivations& a, KvBuffers& kv_rows) {
  Backend& b = backend_;
  Tensor k_out = config_.qk_norm ? Flat(kv_rows.k_pre) : Flat(kv_rows.k);
  b.MatmulXWt(a.xn, w.k_proj, k_out, /*accumulate=*/false);
  LoraForward(b, w.lora.k_proj, w.lora.scale, a.xn, a.lora_u, k_out);
  if (w.k_bias.defined()) b.AddBias(k_out, w.k_bias);
  if (config_.qk_norm) b.RmsNormForward(kv_rows.k_pre, w.k_norm, eps_, kv_rows.k, &kv_rows.k_rstd);
  Tensor v_out = Flat(kv_rows.v);
  b.MatmulXWt(a.xn, w.v_proj, v_out, /*accumulate=*/false);
  LoraForward(b, w.lora.v_proj, w.lora.scale, a.xn, a.lora_u, v_out);
  if (w.v_bias.defined()) b.AddBias(v_out, w.v_bias);
}

void DecoderLayer::ChunkForward(const LayerWeights& w, const Tensor& x_rows, int64_t begin,
                                const KvBuffers& kv, ChunkActivations& a, Tensor y_rows) {
  Backend& b = backend_;
  const int64_t hq = config_.num_attention_heads, d = config_.head_dim;
  ProjectQuery(w, a);
  b.RopeForward(a.q, begin, rope_, docs_);
  Tensor attn = Heads(a.attn, hq, d);
  if (ulysses_ != nullptr) {
    ulysses_->Forward(a, kv, begin, scale_, docs_);
  } else {
    b.AttentionForward(a.q, kv.k, kv.v, begin, scale_, attn, &a.lse, docs_);
  }
  OutputAndMlp(w, x_rows, a, y_rows);
}

void DecoderLayer::DecodeForward(const LayerWeights& w, const Tensor& x_rows,
                                 const std::vector<int64_t>& positions,
                                 const std::vector<KvBuffers*>& caches, ChunkActivations& a,
                                 KvBuffers& new_kv, Tensor y_rows) {
  Backend& b = backend_;
  const int64_t hq = config_.num_attention_heads, d = config_.head_dim;
  CHECK_EQ(static_cast<int64_t>(positions.size()), x_rows.dim(0));
  CHECK_EQ(positions.size(), caches.size());
  InputNorm(w, x_rows, a);
  ProjectKv(w, a, new_kv);
  ProjectQuery(w, a);
  Tensor attn = Heads(a.attn, hq, d);
  for (size_t r = 0; r < positions.size(); ++r) {
    const int64_t i = static_cast<int64_t>(r), pos = positions[r];
    KvBuffers& cache = *caches[r];
    CHECK_LT(pos, cache.k.dim(0)) << "KV cache full";
    Tensor k_row = new_kv.k.Rows(i, i + 1), q_row = a.q.Rows(i, i + 1);
    b.RopeForward(k_row, pos, rope_);
    b.RopeForward(q_row, pos, rope_);
    Tensor k_dst = cache.k.Rows(pos, pos + 1), v_dst = cache.v.Rows(pos, pos + 1);
    b.Copy(k_row, k_dst);
    b.Copy(new_kv.v.Rows(i, i + 1), v_dst);
    Tensor out_row = attn.Rows(i, i + 1);
    b.AttentionForward(q_row, cache.k.Rows(0, pos + 1), cache.v.Rows(0, pos + 1), pos, scale_,
                       out_row, nullptr);
  }
  OutputAndMlp(w, x_rows, a, y_rows);
}

void DecoderLayer::ProjectQuery(const LayerWeights& w, ChunkActivations& a) {
  Backend& b = backend_;
  Tensor q_out = config_.qk_norm ? Flat(a.q_pre) : Flat(a.q);
  b.MatmulXWt(a.xn, w.q_proj, q_out, false);
  LoraForward(b, w.lora.q_proj, w.lora.scale, a.xn, a.lora_u, q_out);
  if (w.q_bias.defined()) b.AddBias(q_out, w.q_bias);
  if (config_.qk_norm) b.RmsNormForward(a.q_pre, w.q_norm, eps_, a.q, &a.q_rstd);
}

void DecoderLayer::OutputAndMlp(const LayerWeights& w, const Tensor& x_rows, ChunkActivations& a,
                                Tensor y_rows) {
  Backend& b = backend_;
  // h = x + attn Wo^T
  b.Cast(x_rows, a.h);
  b.MatmulXWt(a.attn, w.o_proj, a.h, /*accumulate=*/true);
  LoraForward(b, w.lora.o_proj, w.lora.scale, a.attn, a.lora_u, a.h);
  b.RmsNormForward(a.h, w.post_norm, eps_, a.hn, &a.h_rstd);
  b.MatmulXWt(a.hn, w.gate_proj, a.gate, false);
  LoraForward(b, w.lora.gate_proj, w.lora.scale, a.hn, a.lora_u, a.gate);
  b.MatmulXWt(a.hn, w.up_proj, a.up, false);
  LoraForward(b, w.lora.up_proj, w.lora.scale, a.hn, a.lora_u, a.up);
  b.SwigluForward(a.gate, a.up, a.act);
  if (y_rows.defined()) {
    b.Cast(a.h, y_rows);
    b.MatmulXWt(a.act, w.down_proj, y_rows, /*accumulate=*/true);
    LoraForward(b, w.lora.down_proj, w.lora.scale, a.act, a.lora_u, y_rows);
  }
}

void DecoderLayer::ChunkBackward(const LayerWeights& w, const Tensor& x_rows, int64_t begin,
                                 const KvBuffers& kv, ChunkActivations& a, KvGrads& kv_grads,
                                 Tensor& dy, LayerWeights& g) {
  Backend& b = backend_;
  const int64_t hq = config_.num_attention_heads, d = config_.head_dim;
  const LayerAdapters& lw = w.lora;
  LayerAdapters& lg = g.lora;
  // MLP: Y = h + act Wd^T (LoRA terms read their inputs before the base
  // layer's input gradient overwrites them).
  LoraBackwardParams(b, lw.down_proj, lw.scale, a.act, dy, a.lora_u, a.lora_t, lg.down_proj);
  AccumWeightGrad(b, dy, a.act, g.down_proj);
  Tensor& d_act = a.act;
  b.MatmulDyW(dy, w.down_proj, d_act, false);
  LoraBackwardInput(b, lw.down_proj, a.lora_t, d_act);
  Tensor& d_gate = a.gate;
  Tensor& d_up = a.up;
  b.SwigluBackward(a.gate, a.up, d_act, d_gate, d_up);
  LoraBackwardParams(b, lw.gate_proj, lw.scale, a.hn, d_gate, a.lora_u, a.lora_t, lg.gate_proj);
  LoraBackwardParams(b, lw.up_proj, lw.scale, a.hn, d_up, a.lora_u, a.lora_t2, lg.up_proj);
  AccumWeightGrad(b, d_gate, a.hn, g.gate_proj);
  AccumWeightGrad(b, d_up, a.hn, g.up_proj);
  Tensor& d_hn = a.hn;
  b.MatmulDyW(d_gate, w.gate_proj, d_hn, false);
  b.MatmulDyW(d_up, w.up_proj, d_hn, true);
  LoraBackwardInput(b, lw.gate_proj, a.lora_t, d_hn);
  LoraBackwardInput(b, lw.up_proj, a.lora_t2, d_hn);
  // dh = dY + post-norm backward (in place over d_hn).
  b.RmsNormBackward(a.h, w.post_norm, a.h_rstd, d_hn, d_hn, g.post_norm);
  Tensor& dh = a.hn;
  b.Add(dh, dy, dh);
  // Attention output projection.
  LoraBackwardParams(b, lw.o_proj, lw.scale, a.attn, dh, a.lora_u, a.lora_t, lg.o_proj);
  AccumWeightGrad(b, dh, a.attn, g.o_proj);
  b.MatmulDyW(dh, w.o_proj, a.d_attn, false);
  LoraBackwardInput(b, lw.o_proj, a.lora_t, a.d_attn);
  if (ulysses_ != nullptr) {
    ulysses_->Backward(a, kv, kv_grads, begin, scale_, docs_);
  } else {
    b.AttentionBackward(a.q, kv.k, kv.v, Heads(a.attn, hq, d), Heads(a.d_attn, hq, d), a.lse, begin,
                        scale_, a.dq, kv_grads.dk, kv_grads.dv, docs_);
  }
  b.RopeBackward(a.dq, begin, rope_, docs_);
  if (config_.qk_norm) b.RmsNormBackward(a.q_pre, w.q_norm, a.q_rstd, a.dq, a.dq, g.q_norm);
  Tensor dq = Flat(a.dq);
  if (g.q_bias.defined()) b.BiasBackward(dq, g.q_bias);
  LoraBackwardParams(b, lw.q_proj, lw.scale, a.xn, dq, a.lora_u, a.lora_t, lg.q_proj);
  AccumWeightGrad(b, dq, a.xn, g.q_proj);
  Tensor& d_xn = a.xn;
  b.MatmulDyW(dq, w.q_proj, d_xn, false);
  LoraBackwardInput(b, lw.q_proj, a.lora_t, d_xn);
  b.RmsNormBackward(x_rows, w.input_norm, a.x_rstd, d_xn, d_xn, g.input_norm);
  b.Add(dh, d_xn, dy);
}

void DecoderLayer::KvBackward(const LayerWeights& w, const Tensor& x_rows, int64_t begin,
                              const KvBuffers& kv_rows, KvGrads& kv_grad_rows, ChunkActivations& a,
                              Tensor& dx_rows, LayerWeights& g) {
  Backend& b = backend_;
  b.RopeBackward(kv_grad_rows.dk, begin, rope_, docs_);
  if (config_.qk_norm) {
    b.RmsNormBackward(kv_rows.k_pre, w.k_norm, kv_rows.k_rstd, kv_grad_rows.dk, kv_grad_rows.dk,
                      g.k_norm);
  }
  Tensor dk = Flat(kv_grad_rows.dk);
  Tensor dv = Flat(kv_grad_rows.dv);
  b.RmsNormForward(x_rows, w.input_norm, eps_, a.xn, &a.x_rstd);
  if (g.k_bias.defined()) b.BiasBackward(dk, g.k_bias);
  if (g.v_bias.defined()) b.BiasBackward(dv, g.v_bias);
  const LayerAdapters& lw = w.lora;
  LoraBackwardParams(b, lw.k_proj, lw.scale, a.xn, dk, a.lora_u, a.lora_t, g.lora.k_proj);
  LoraBackwardParams(b, lw.v_proj, lw.scale, a.xn, dv, a.lora_u, a.lora_t2, g.lora.v_proj);
  AccumWeightGrad(b, dk, a.xn, g.k_proj);
  AccumWeightGrad(b, dv, a.xn, g.v_proj);
  Tensor& d_xn = a.hn;
  b.MatmulDyW(dk, w.k_proj, d_xn, false);
  b.MatmulDyW(dv, w.v_proj, d_xn, true);
  LoraBackwardInput(b, lw.k_proj, a.lora_t, d_xn);
  LoraBackwardInput(b, lw.v_proj, a.lora_t2, d_xn);
  b.RmsNormBackward(x_rows, w.input_norm, a.x_rstd, d_xn, d_xn, g.input_norm);
  b.Axpy(1.0f, d_xn, dx_rows);
}

}  // namespace sbp
