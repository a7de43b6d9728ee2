#!/usr/bin/env python3
"""Generates the PyTorch / Hugging Face golden files the C++ engine tests compare against.

Usage (from the repository root):
  scripts/bootstrap --python
  .venv/bin/python tests/reference/generate_goldens.py [--out tests/reference/golden]
  .venv/bin/python tests/reference/generate_goldens.py --verify          # regenerate, compare bytes
  .venv/bin/python tests/reference/generate_goldens.py --check-sbp build/bin/sbp

For each preset (tiny-qwen3, tiny-llama, tiny-qwen2, and tiny-llama3-rope /
tiny-qwen3-yarn with scaled RoPE) it builds the REAL transformers model
class (Qwen3ForCausalLM / LlamaForCausalLM / Qwen2ForCausalLM) in float32 with fixed seeds,
saves it with save_pretrained(safe_serialization=True), reloads it from disk, converts it to
float64 and computes the Hugging Face causal-LM loss of a small batch (position t predicts
token t+1, labels -100 ignored, mean over all valid targets of the whole batch) and the
gradient of that loss w.r.t. every parameter. It also writes rope-tables.json: the inverse
frequencies and attention scaling that transformers' ROPE_INIT_FUNCTIONS give for a set of
config.json files (linear, llama3, yarn, in every spelling). See tests/reference/README.md.

--check-sbp PATH checks the sbp CLI against the committed goldens instead of writing them.
"""

import argparse
import contextlib
import copy
import hashlib
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file

# ---------------------------------------------------------------------------------------------
# Presets. The C++ side builds the same configs from these names; keep them in sync.

_COMMON = dict(
    vocab_size=256,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=192,
    max_position_embeddings=4096,
    hidden_act="silu",
    attention_dropout=0.0,
    initializer_range=0.02,
    use_cache=False,
    # No padding_idx: nn.Embedding(padding_idx=...) would zero that row's gradient.
    pad_token_id=None,
    bos_token_id=None,
    eos_token_id=None,
)

# Smaller shapes for the scaled-RoPE presets (their files stay near 100 KiB each), run on a
# longer batch: positions up to 63, twice original_max_position_embeddings (32), so that
# every regime of the scaling is exercised (head_dim 16, theta 1e4: the pair wavelengths
# 6.3, 19.9, 62.8, ... fall on both sides of 32/4 and 32).
_SMALL = dict(
    _COMMON,
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
)

PRESETS = {
    "tiny-qwen3": dict(
        model_class="Qwen3ForCausalLM",
        config_class="Qwen3Config",
        seed=1003,
        config=dict(
            _COMMON,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            rms_norm_eps=1e-6,
            attention_bias=False,
            use_sliding_window=False,
            sliding_window=None,
        ),
    ),
    "tiny-llama": dict(
        model_class="LlamaForCausalLM",
        config_class="LlamaConfig",
        seed=1001,
        config=dict(
            _COMMON,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1e4},
            rms_norm_eps=1e-5,
            attention_bias=False,
            mlp_bias=False,
        ),
    ),
    "tiny-qwen2": dict(
        model_class="Qwen2ForCausalLM",
        config_class="Qwen2Config",
        seed=1002,
        config=dict(
            _COMMON,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            rms_norm_eps=1e-6,
            use_sliding_window=False,
            sliding_window=None,
        ),
    ),
    "tiny-llama3-rope": dict(
        model_class="LlamaForCausalLM",
        config_class="LlamaConfig",
        seed=1004,
        batch="long",
        config=dict(
            _SMALL,
            max_position_embeddings=256,
            tie_word_embeddings=True,
            # Llama 3.1's scaling over a 32-position original context: pair 0 (wavelength
            # 6.3 < 32/4) is kept, pair 1 (19.9) is smoothed, the rest are divided by 8.
            rope_parameters={"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 32},
            rms_norm_eps=1e-5,
            attention_bias=False,
            mlp_bias=False,
        ),
    ),
    "tiny-qwen3-yarn": dict(
        model_class="Qwen3ForCausalLM",
        config_class="Qwen3Config",
        seed=1005,
        batch="long",
        config=dict(
            _SMALL,
            max_position_embeddings=128,
            tie_word_embeddings=False,
            # Qwen3's long-context setting (factor 4) over a 32-position original context:
            # the ramp runs over pairs [0, 2] (pair 0 kept, 1 half, the rest interpolated),
            # attention scaling 0.1 ln 4 + 1.
            rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                             "original_max_position_embeddings": 32},
            rms_norm_eps=1e-6,
            attention_bias=False,
            use_sliding_window=False,
            sliding_window=None,
        ),
    ),
}

# The batch: (length, masked label positions). Labels equal input_ids except -100 at the
# listed positions. Position t predicts label t+1, so a 1-token sequence has no target.
# Sequence 0 masks a prompt prefix and an interior span 16..24 that crosses the chunk
# boundaries of --chunk-tokens 5 (15|20|25) and --logits-chunk-tokens 7 (14|21).
BATCH_SEED = 20240611
BATCH_LAYOUT = [
    (37, list(range(0, 5)) + list(range(16, 25))),  # prompt 5, interior span 16..24
    (23, []),                                        # fully labelled
    (13, [0, 1, 2, 7, 11, 12]),                      # prompt 3, one interior, masked tail
    (2, [0]),                                        # prompt 1: exactly one target
    (1, []),                                         # one token: no target at all
]

# The scaled-RoPE presets' batch: a 64-token sequence (positions beyond the original 32;
# prompt 5, interior span 40..47 across chunk boundaries) and shorter ones.
BATCH_LAYOUT_LONG = [
    (64, list(range(0, 5)) + list(range(40, 48))),
    (37, [0, 1, 2, 20]),
    (2, [0]),
    (1, []),
]
BATCH_LAYOUTS = {"default": BATCH_LAYOUT, "long": BATCH_LAYOUT_LONG}

IGNORE_INDEX = -100
GRAD_TOLERANCE = 1e-5   # --check-sbp: normwise relative error per gradient tensor
LOSS_TOLERANCE = 1e-5   # --check-sbp: relative error of the loss
CHECK_PRESET = "tiny-qwen3"
CHECK_SEED = 7


# ---------------------------------------------------------------------------------------------
# Helpers


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_batch(layout="default", vocab_size=_COMMON["vocab_size"]):
    rng = np.random.Generator(np.random.PCG64(BATCH_SEED))
    batch = []
    for length, masked in BATCH_LAYOUTS[layout]:
        ids = [int(t) for t in rng.integers(0, vocab_size, size=length)]
        labels = [IGNORE_INDEX if i in masked else t for i, t in enumerate(ids)]
        batch.append({"input_ids": ids, "labels": labels})
    return batch


def read_batch(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_batch(path, batch):
    with open(path, "w") as f:
        for row in batch:
            f.write(json.dumps({"input_ids": row["input_ids"], "labels": row["labels"]},
                               separators=(",", ":")) + "\n")


def valid_targets(labels):
    """Number of shifted targets (positions t with labels[t+1] != -100)."""
    return sum(1 for t in labels[1:] if t != IGNORE_INDEX)


def build_model(preset):
    spec = PRESETS[preset]
    config = getattr(transformers, spec["config_class"])(**spec["config"])
    torch.manual_seed(spec["seed"])
    model = getattr(transformers, spec["model_class"])._from_config(
        config, attn_implementation="eager", dtype=torch.float32)
    # Overwrite every parameter from our own generator so the values do not depend on the
    # order or the distributions of transformers' initialisers.
    gen = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)  # RMSNorm weights (also Qwen3 q_norm / k_norm)
            else:
                p.copy_(0.02 * noise)       # linear and embedding weights, q/k/v biases
    assert model.model.embed_tokens.padding_idx is None
    return model


def load_model(model_dir, dtype=torch.float32):
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, attn_implementation="eager", output_loading_info=True)
    model.eval()  # no dropout anywhere (attention_dropout is 0 too)
    return model, info


def loading_problems(info):
    problems = []
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        values = info.get(key) or []
        if len(values):
            problems.append(f"{key}: {sorted(map(str, values))}")
    return problems


def loss_and_grads(model, batch):
    """HF causal-LM loss over the whole batch: sum of per-token CE of every sequence (run one
    at a time, batch size 1, no padding) divided by the global number of valid targets."""
    model.zero_grad(set_to_none=True)
    total_valid = sum(valid_targets(row["labels"]) for row in batch)
    assert total_valid > 0
    dtype = next(model.parameters()).dtype
    total = torch.zeros((), dtype=dtype)
    per_seq_sums, per_seq_counts, first_logits = [], [], None
    for row in batch:
        ids = torch.tensor([row["input_ids"]], dtype=torch.long)
        labels = torch.tensor(row["labels"], dtype=torch.long)
        logits = model(input_ids=ids, use_cache=False).logits[0]  # [T, V]
        if first_logits is None:
            first_logits = logits.detach().clone()
        shift_logits, shift_labels = logits[:-1], labels[1:]
        seq_sum = F.cross_entropy(shift_logits, shift_labels, ignore_index=IGNORE_INDEX,
                                  reduction="sum")
        total = total + seq_sum
        per_seq_sums.append(float(seq_sum.detach()))
        per_seq_counts.append(valid_targets(row["labels"]))
    loss = total / total_valid
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return dict(loss=float(loss.detach()), valid=total_valid, per_seq_sums=per_seq_sums,
                per_seq_counts=per_seq_counts, grads=grads, first_logits=first_logits)


def hf_loss_sanity(model, batch, result):
    """Independent check: the loss transformers' own forward(labels=...) returns (its
    ForCausalLMLoss, which upcasts logits to float32) agrees with ours, per sequence and,
    with num_items_in_batch, for the whole batch."""
    with torch.no_grad():
        batch_sum = 0.0
        for row, our_sum, count in zip(batch, result["per_seq_sums"], result["per_seq_counts"]):
            if count == 0:
                continue  # HF's mean over zero targets is NaN
            ids = torch.tensor([row["input_ids"]], dtype=torch.long)
            labels = torch.tensor([row["labels"]], dtype=torch.long)
            hf_mean = float(model(input_ids=ids, labels=labels, use_cache=False).loss)
            ours = our_sum / count
            assert math.isclose(hf_mean, ours, rel_tol=1e-6), (hf_mean, ours)
            batch_sum += float(model(input_ids=ids, labels=labels, use_cache=False,
                                     num_items_in_batch=result["valid"]).loss)
        assert math.isclose(batch_sum, result["loss"], rel_tol=1e-6), (batch_sum, result["loss"])


# ---------------------------------------------------------------------------------------------
# Precision study: transformers keeps three float32 islands even in a float64 model (rotary
# cos/sin, the RMSNorm upcast `.to(torch.float32)`, and eager attention's softmax with
# dtype=float32). The engine computes RoPE angles in double. We measure how much the goldens
# move when each island is computed in float64 instead; the goldens themselves use the
# unpatched classes.


def rope_table64(cfg):
    """The inverse frequencies and attention scaling of cfg.rope_parameters in float64 (our own
    statement of the formulas in transformers' modeling_rope_utils.py, which computes them in
    float32); used for the precision study and checked against transformers below."""
    params = cfg.rope_parameters
    kind = params["rope_type"]
    theta = float(params["rope_theta"])
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = 1.0
    if kind == "linear":
        inv = inv / params["factor"]
    elif kind == "llama3":
        factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
        original = params["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (original / wavelen - low) / (high - low)
        medium = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(wavelen > original / low, inv / factor,
                          torch.where(wavelen < original / high, inv, medium))
    elif kind == "yarn":
        factor = params.get("factor") or cfg.max_position_embeddings / params[
            "original_max_position_embeddings"]
        original = params["original_max_position_embeddings"]

        def correction_dim(rotations):
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))
        lo = correction_dim(params.get("beta_fast") or 32)
        hi = correction_dim(params.get("beta_slow") or 1)
        if params.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
        inv = inv / factor * ramp + inv * (1 - ramp)

        def mscale(m):
            return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0
        if params.get("attention_factor") is not None:
            scaling = params["attention_factor"]
        elif params.get("mscale") and params.get("mscale_all_dim"):
            scaling = mscale(params["mscale"]) / mscale(params["mscale_all_dim"])
        else:
            scaling = mscale(1)
    else:
        assert kind == "default", kind
    return inv, float(scaling)


def _rope64_forward(module):
    inv_freq, scaling = rope_table64(module.config)
    assert math.isclose(scaling, float(module.attention_scaling), rel_tol=1e-12)

    def forward(x, position_ids):
        freqs = position_ids[..., None].to(torch.float64) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)
    return forward


def _rmsnorm64_forward(module):
    def forward(x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return module.weight * (x * torch.rsqrt(variance + module.variance_epsilon))
    return forward


@contextlib.contextmanager
def _softmax_in_input_dtype():
    original = torch.nn.functional.softmax

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if dtype == torch.float32 and input.dtype == torch.float64:
            dtype = None
        return original(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)
    torch.nn.functional.softmax = softmax
    try:
        yield
    finally:
        torch.nn.functional.softmax = original


def patched_result(model64, batch, rope=False, rmsnorm=False, softmax=False):
    model = copy.deepcopy(model64)
    for module in model.modules():
        kind = type(module).__name__
        if rope and kind.endswith("RotaryEmbedding"):
            module.forward = _rope64_forward(module)
        if rmsnorm and kind.endswith("RMSNorm"):
            module.forward = _rmsnorm64_forward(module)
    ctx = _softmax_in_input_dtype() if softmax else contextlib.nullcontext()
    with ctx:
        return loss_and_grads(model, batch)


def grad_distance(a, b):
    """Normwise relative difference of the concatenated gradients, and the worst tensor."""
    num = sum(float((a[k] - b[k]).double().pow(2).sum()) for k in a)
    den = sum(float(b[k].double().pow(2).sum()) for k in a)
    worst = max(float((a[k] - b[k]).double().norm() / b[k].double().norm()) for k in a)
    return math.sqrt(num / den), worst


def precision_study(model64, batch, base):
    out = {}
    for label, kw in [("rope", dict(rope=True)), ("rmsnorm", dict(rmsnorm=True)),
                      ("softmax", dict(softmax=True)),
                      ("all", dict(rope=True, rmsnorm=True, softmax=True))]:
        r = patched_result(model64, batch, **kw)
        total, worst = grad_distance(base["grads"], r["grads"])
        out[label] = dict(grad_rel=total, worst_tensor_rel=worst,
                          loss_rel=abs(base["loss"] - r["loss"]) / abs(r["loss"]))
    return out


def fmt(x):
    return f"{x:.2e}"


# ---------------------------------------------------------------------------------------------
# Generation


def generate_preset(preset, out_root):
    spec = PRESETS[preset]
    out = os.path.join(out_root, preset)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)

    model32 = build_model(preset)
    model32.save_pretrained(out, safe_serialization=True)
    gen_cfg = os.path.join(out, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)  # not part of the golden; the engine reads config.json only

    # Compute from what is on disk: reload (must be clean), then float64.
    model, info = load_model(out, dtype=torch.float32)
    problems = loading_problems(info)
    assert not problems, f"{preset}: reloading the saved model: {problems}"
    assert type(model).__name__ == spec["model_class"], type(model).__name__
    saved = load_file(os.path.join(out, "model.safetensors"))
    for name, p in model.named_parameters():
        assert torch.equal(p, dict(model32.named_parameters())[name]), name
        assert saved[name].dtype == torch.float32, name
    if spec["config"]["tie_word_embeddings"]:
        assert "lm_head.weight" not in saved
        assert model.lm_head.weight is model.model.embed_tokens.weight
    model = model.double()

    batch = make_batch(spec.get("batch", "default"), spec["config"]["vocab_size"])
    write_batch(os.path.join(out, "batch.jsonl"), batch)

    base = loss_and_grads(model, batch)
    hf_loss_sanity(model, batch, base)
    names = [n for n, _ in model.named_parameters()]
    assert sorted(names) == sorted(saved.keys()), (names, sorted(saved.keys()))

    save_file({k: v.to(torch.float32).contiguous() for k, v in sorted(base["grads"].items())},
              os.path.join(out, "grads.safetensors"), metadata={"format": "pt"})
    save_file({"logits": base["first_logits"].to(torch.float32).contiguous()},
              os.path.join(out, "logits.safetensors"), metadata={"format": "pt"})

    study = precision_study(model, batch, base)
    rope = study["rope"]
    rope_note = (
        f"transformers computes the rotary cos/sin in float32 even for a float64 model; "
        f"these goldens use the unpatched classes. Computing cos/sin (and inv_freq) in "
        f"float64 instead changes the loss by {fmt(rope['loss_rel'])} (relative) and the "
        f"gradients by {fmt(rope['grad_rel'])} (normwise relative over all parameters; "
        f"worst tensor {fmt(rope['worst_tensor_rel'])}).")
    golden = {
        "preset": preset,
        "model_class": spec["model_class"],
        "loss": base["loss"],
        "valid_targets": base["valid"],
        "sequences": len(batch),
        "per_sequence_loss_sum": base["per_seq_sums"],
        "per_sequence_valid_targets": base["per_seq_counts"],
        "dtype": "float64",
        "files_dtype": "float32",
        "loss_definition": (
            "sum over sequences and positions t of cross_entropy(logits[t], labels[t+1]) "
            "with labels -100 ignored, divided by valid_targets (all sequences together)"),
        "logits": "logits.safetensors['logits'] = logits of sequence 0, [T, vocab]",
        "attn_implementation": "eager",
        "init_seed": spec["seed"],
        "batch_seed": BATCH_SEED,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "rope_note": rope_note,
        "float32_islands": {
            k: {m: float(fmt(v)) for m, v in d.items()} for k, d in study.items()},
    }
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=2)
        f.write("\n")
    return golden


# ---------------------------------------------------------------------------------------------
# RoPE tables: what transformers computes from config.json for each scaling and spelling.

CONFIGS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def published_config(name):
    with open(os.path.join(CONFIGS_DIR, name + ".json")) as f:
        return json.load(f)


def _with(config, drop=(), **fields):
    out = {k: copy.deepcopy(v) for k, v in config.items() if k not in drop}
    out.update(copy.deepcopy(fields))
    return out


def rope_table_cases():
    """(name, config.json object). Every spelling the engine reads: transformers 4.x
    `rope_scaling` with "rope_type" or the older "type" and a top-level rope_theta, and
    transformers 5 `rope_parameters` with rope_theta inside."""
    llama31 = published_config("llama-3.1-8b-instruct")
    qwen3_yarn = published_config("qwen3-8b-yarn")
    qwen3 = _with(qwen3_yarn, rope_scaling=None)
    yarn = qwen3_yarn["rope_scaling"]
    cases = [
        ("llama-3.1-8b-instruct", llama31),
        ("llama-3.2-1b-instruct", published_config("llama-3.2-1b-instruct")),
        ("llama-3.2-3b-instruct", published_config("llama-3.2-3b-instruct")),
        ("qwen3-8b-yarn", qwen3_yarn),
        ("qwen3-8b-yarn-old-type-key",
         _with(qwen3, rope_scaling={"type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 32768})),
        ("qwen3-8b-yarn-rope-parameters",
         _with(qwen3, drop=("rope_theta", "rope_scaling"),
               rope_parameters=dict(yarn, rope_theta=1000000.0))),
        ("yarn-betas-no-truncate",
         _with(qwen3, rope_scaling=dict(yarn, beta_fast=16.0, beta_slow=2.0, truncate=False))),
        ("yarn-zero-betas-mean-defaults",
         _with(qwen3, rope_scaling=dict(yarn, beta_fast=0, beta_slow=0))),
        ("yarn-attention-factor", _with(qwen3, rope_scaling=dict(yarn, attention_factor=0.85))),
        ("yarn-mscale", _with(qwen3, rope_scaling=dict(yarn, factor=40.0, mscale=0.707,
                                                      mscale_all_dim=1.0))),
        ("yarn-factor-null-is-the-length-ratio",
         _with(qwen3, max_position_embeddings=131072, rope_scaling=dict(yarn, factor=None))),
        ("yarn-factor-below-one", _with(qwen3, rope_scaling=dict(yarn, factor=0.5))),
        ("llama3-top-level-original-wins",
         _with(llama31, original_max_position_embeddings=4096)),
        ("llama3-original-defaults-to-max-positions",
         _with(llama31, max_position_embeddings=16384, rope_scaling={
             k: v for k, v in llama31["rope_scaling"].items()
             if k != "original_max_position_embeddings"})),
        ("llama3-rope-parameters",
         _with(llama31, drop=("rope_theta", "rope_scaling"),
               rope_parameters=dict(llama31["rope_scaling"], rope_theta=500000.0))),
        ("linear-old-type-key", _with(llama31, rope_theta=10000.0,
                                      rope_scaling={"type": "linear", "factor": 2.0})),
        ("linear-rope-parameters",
         _with(qwen3, drop=("rope_theta",),
               rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6})),
        ("rope-type-wins-over-type",
         _with(qwen3, rope_scaling={"type": "yarn", "rope_type": "linear", "factor": 3.0})),
        ("rope-scaling-wins-over-rope-parameters",
         _with(qwen3, rope_theta=250000.0, rope_scaling=yarn,
               rope_parameters={"rope_type": "default", "rope_theta": 7.0})),
        ("empty-rope-scaling-falls-back",
         _with(qwen3, drop=("rope_theta",), rope_scaling={},
               rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5})),
        ("default", qwen3),
    ]
    for preset in ("tiny-llama3-rope", "tiny-qwen3-yarn"):
        spec = PRESETS[preset]
        config = dict(spec["config"], architectures=[spec["model_class"]],
                      model_type=spec["model_class"][:-len("ForCausalLM")].lower())
        cases.append((preset, config))
    return cases


def rotary_class(config):
    module = importlib.import_module(f"transformers.models.{config.model_type}."
                                     f"modeling_{config.model_type}")
    prefix = type(config).__name__[:-len("Config")]
    return getattr(module, prefix + "RotaryEmbedding")


def generate_rope_tables(out_root):
    """rope-tables.json: for every case, the inverse frequencies and attention scaling that the
    model class's rotary embedding holds (== ROPE_INIT_FUNCTIONS[rope_type](config), asserted),
    as transformers computes them (float32 frequencies, double scaling)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    cases = []
    with tempfile.TemporaryDirectory(prefix="sbp-rope-") as tmp:
        for name, config_json in rope_table_cases():
            path = os.path.join(tmp, name)
            os.makedirs(path)
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(config_json, f)
            config = transformers.AutoConfig.from_pretrained(path)
            rotary = rotary_class(config)(config)
            inv_freq = rotary.inv_freq.to(torch.float32)
            kind = config.rope_parameters["rope_type"]
            if kind != "default":
                fn_inv, fn_scaling = ROPE_INIT_FUNCTIONS[kind](copy.deepcopy(config))
                assert torch.equal(fn_inv, inv_freq), name
                assert fn_scaling == rotary.attention_scaling, name
            ours, scaling = rope_table64(config)
            rel = float(((ours - inv_freq.double()) / ours).abs().max())
            assert rel < 1e-6 and math.isclose(scaling, rotary.attention_scaling,
                                               rel_tol=1e-12), (name, rel, scaling)
            cases.append({
                "name": name,
                "config": config_json,
                "rope_type": kind,
                "head_dim": 2 * len(inv_freq),
                "inv_freq": [float(x) for x in inv_freq],
                "attention_scaling": float(rotary.attention_scaling),
            })
    out = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "source": ("for each config.json: <Model>RotaryEmbedding(AutoConfig.from_pretrained(dir)) "
                   ".inv_freq (float32, as transformers computes it) and .attention_scaling; "
                   "equal to ROPE_INIT_FUNCTIONS[rope_type](config)"),
        "cases": cases,
    }
    with open(os.path.join(out_root, "rope-tables.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return out


def generate_all(out_root):
    os.makedirs(out_root, exist_ok=True)
    tables = generate_rope_tables(out_root)
    print(f"rope-tables.json: {len(tables['cases'])} configs")
    summary = {}
    for preset in PRESETS:
        g = generate_preset(preset, out_root)
        summary[preset] = g
        print(f"{preset}: loss={g['loss']!r} valid_targets={g['valid_targets']} "
              f"sequences={g['sequences']}")
        for name, d in g["float32_islands"].items():
            print(f"  float32 island '{name}' computed in float64 instead: "
                  f"grad rel {fmt(d['grad_rel'])}, worst tensor {fmt(d['worst_tensor_rel'])}, "
                  f"loss rel {fmt(d['loss_rel'])}")
    total = 0
    print("wrote:")
    for root, _, files in sorted(os.walk(out_root)):
        for name in sorted(files):
            path = os.path.join(root, name)
            size = os.path.getsize(path)
            total += size
            print(f"  {size:>9}  {sha256_of(path)}  {os.path.relpath(path)}")
    print(f"  {total:>9}  bytes in all")
    return summary


def tree_digest(root):
    out = {}
    for base, _, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            out[os.path.relpath(path, root)] = sha256_of(path)
    return out


def verify(out_root):
    with tempfile.TemporaryDirectory(prefix="sbp-goldens-") as tmp:
        generate_all(tmp)
        fresh, committed = tree_digest(tmp), tree_digest(out_root)
    if fresh == committed:
        print(f"verify: PASS ({len(fresh)} files byte-identical to {out_root})")
        return 0
    for rel in sorted(set(fresh) | set(committed)):
        if fresh.get(rel) != committed.get(rel):
            print(f"verify: FAIL {rel} differs")
    return 1


# ---------------------------------------------------------------------------------------------
# --check-sbp: the sbp CLI against the goldens and transformers


class Checker:
    def __init__(self):
        self.failures = 0

    def report(self, name, ok, detail=""):
        print(f"[{'PASS' if ok else 'FAIL'}] {name}" + (f": {detail}" if detail else ""))
        sys.stdout.flush()
        if not ok:
            self.failures += 1
        return ok


def run_sbp(argv):
    print("  $ " + " ".join(argv))
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if p.returncode != 0:
        tail = (p.stdout + p.stderr)[-2000:]
        return None, f"exit {p.returncode}: {tail}"
    return p.stdout, ""


def parse_loss(stdout):
    """The loss from sbp grad's JSON output (the whole output, or its last JSON line)."""
    candidates = [stdout] + list(reversed(stdout.strip().splitlines()))
    for text in candidates:
        try:
            obj = json.loads(text)
        except ValueError:
            continue
        if isinstance(obj, dict) and "loss" in obj:
            return float(obj["loss"])
    return None


def compare_grads(checker, name, got_path, want):
    try:
        got = load_file(got_path)
    except Exception as e:  # noqa: BLE001 - any unreadable file is a failure to report
        return checker.report(name, False, f"cannot read {got_path}: {e}")
    if sorted(got) != sorted(want):
        return checker.report(name, False, f"tensor names differ: missing "
                              f"{sorted(set(want) - set(got))}, extra {sorted(set(got) - set(want))}")
    worst, worst_name, bad = 0.0, "", []
    for k in sorted(want):
        g, w = got[k].double(), want[k].double()
        if tuple(g.shape) != tuple(w.shape):
            bad.append(f"{k} shape {tuple(g.shape)} != {tuple(w.shape)}")
            continue
        denom = float(w.norm())
        err = float((g - w).norm()) / denom if denom > 0 else float((g - w).norm())
        if not math.isfinite(err) or err > GRAD_TOLERANCE:
            bad.append(f"{k} rel {err:.3e}")
        if not math.isfinite(err) or err > worst:
            worst, worst_name = err, k
    detail = f"{len(want)} tensors, worst normwise rel err {worst:.3e} ({worst_name})"
    if bad:
        detail += "; over " + fmt(GRAD_TOLERANCE) + ": " + ", ".join(bad)
    return checker.report(name, not bad, detail)


def compare_loss(checker, name, got, want):
    if got is None:
        return checker.report(name, False, "no JSON object with \"loss\" in sbp grad's output")
    rel = abs(got - want) / abs(want)
    return checker.report(name, rel <= LOSS_TOLERANCE,
                          f"sbp {got!r} vs torch {want!r} (rel {rel:.3e})")


def grad_argv(sbp, model_dir, data, out):
    return [sbp, "grad", "--model", model_dir, "--data", data, "--mode", "stream",
            "--chunk-tokens", "5", "--logits-chunk-tokens", "7", "--out", out]


SCALED_ROPE_PRESETS = ("tiny-llama3-rope", "tiny-qwen3-yarn")


def check_scaled_rope_init(checker, sbp, golden_root, preset, tmp):
    gdir = os.path.join(golden_root, preset)
    if not os.path.isdir(gdir):
        return
    ours = os.path.join(tmp, f"ours-{preset}")
    _, err = run_sbp([sbp, "model", "init", "--config", os.path.join(gdir, "config.json"),
                      "--seed", str(CHECK_SEED), "--out", ours])
    if not checker.report(f"model init --config {preset}/config.json runs", not err, err):
        return
    name = f"{preset}: sbp's config.json loads with the same RoPE"
    try:
        model, info = load_model(ours, dtype=torch.float32)
        golden_model, _ = load_model(gdir, dtype=torch.float32)
        problems = loading_problems(info)
        want = {k: v for k, v in golden_model.config.rope_parameters.items()}
        got = {k: v for k, v in model.config.rope_parameters.items()}
        if got != want:
            problems.append(f"rope_parameters {got} != {want}")
        if not torch.equal(model.model.rotary_emb.inv_freq, golden_model.model.rotary_emb.inv_freq):
            problems.append("rotary inv_freq differs")
        if model.model.rotary_emb.attention_scaling != golden_model.model.rotary_emb.attention_scaling:
            problems.append("attention_scaling differs")
        checker.report(name, not problems, "; ".join(problems))
    except Exception as e:  # noqa: BLE001
        checker.report(name, False, f"{type(e).__name__}: {e}")
        return
    data = os.path.join(gdir, "batch.jsonl")
    ref = loss_and_grads(model.double(), read_batch(data))
    out = os.path.join(tmp, f"g-ours-{preset}.safetensors")
    stdout, err = run_sbp(grad_argv(sbp, ours, data, out))
    if checker.report(f"grad on sbp's {preset} model runs", not err, err):
        compare_loss(checker, f"grad on sbp's {preset} model: loss", parse_loss(stdout),
                     ref["loss"])
        compare_grads(checker, f"grad on sbp's {preset} model: gradients", out,
                      {k: v.float() for k, v in ref["grads"].items()})


def check_sbp(sbp, golden_root):
    checker = Checker()
    sbp = os.path.abspath(sbp)
    presets = [p for p in PRESETS if os.path.isdir(os.path.join(golden_root, p))]
    if not presets:
        print(f"no goldens under {golden_root}")
        return 1
    with tempfile.TemporaryDirectory(prefix="sbp-check-") as tmp:
        # (a) sbp model init writes a directory transformers loads cleanly.
        ours = os.path.join(tmp, "ours")
        _, err = run_sbp([sbp, "model", "init", "--preset", CHECK_PRESET,
                          "--seed", str(CHECK_SEED), "--out", ours])
        ours_model = None
        if checker.report(f"model init --preset {CHECK_PRESET} runs", not err, err):
            try:
                ours_model, info = load_model(ours, dtype=torch.float32)
                problems = loading_problems(info)
                want_cfg = PRESETS[CHECK_PRESET]["config"]
                cfg = ours_model.config
                for key in ("vocab_size", "hidden_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "head_dim",
                            "intermediate_size", "tie_word_embeddings", "rms_norm_eps"):
                    if getattr(cfg, key, None) != want_cfg[key]:
                        problems.append(f"config {key}={getattr(cfg, key, None)!r}, "
                                        f"want {want_cfg[key]!r}")
                theta = cfg.rope_parameters["rope_theta"]
                if theta != want_cfg["rope_parameters"]["rope_theta"]:
                    problems.append(f"rope_theta={theta!r}")
                if type(ours_model).__name__ != PRESETS[CHECK_PRESET]["model_class"]:
                    problems.append(f"class {type(ours_model).__name__}")
                for name, p in ours_model.named_parameters():
                    if not bool(torch.isfinite(p).all()) or not bool(p.ne(0).any()):
                        problems.append(f"{name} is not finite or is all zero")
                checker.report("AutoModelForCausalLM.from_pretrained(ours) loads cleanly",
                               not problems, "; ".join(problems))
            except Exception as e:  # noqa: BLE001
                ours_model = None
                checker.report("AutoModelForCausalLM.from_pretrained(ours) loads cleanly",
                               False, f"{type(e).__name__}: {e}")

        # (b) sbp grad (stream mode, small chunks) on each golden equals the golden.
        for preset in presets:
            gdir = os.path.join(golden_root, preset)
            with open(os.path.join(gdir, "golden.json")) as f:
                golden = json.load(f)
            out = os.path.join(tmp, f"g-{preset}.safetensors")
            stdout, err = run_sbp(grad_argv(sbp, gdir, os.path.join(gdir, "batch.jsonl"), out))
            if not checker.report(f"grad {preset} runs", not err, err):
                continue
            compare_loss(checker, f"grad {preset} loss", parse_loss(stdout), golden["loss"])
            compare_grads(checker, f"grad {preset} gradients", out,
                          load_file(os.path.join(gdir, "grads.safetensors")))

        # (c) sbp grad on sbp's own model equals torch on the same model.
        if ours_model is not None:
            data = os.path.join(golden_root, CHECK_PRESET, "batch.jsonl")
            if not os.path.exists(data):
                data = os.path.join(tmp, "batch.jsonl")
                write_batch(data, make_batch())
            ref = loss_and_grads(ours_model.double(), read_batch(data))
            out = os.path.join(tmp, "g-ours.safetensors")
            stdout, err = run_sbp(grad_argv(sbp, ours, data, out))
            if checker.report("grad on sbp's own model runs", not err, err):
                compare_loss(checker, "grad on sbp's own model: loss", parse_loss(stdout),
                             ref["loss"])
                compare_grads(checker, "grad on sbp's own model: gradients", out,
                              {k: v.float() for k, v in ref["grads"].items()})

        # (d) RoPE scaling survives sbp's config.json: a model sbp initialises from each
        # scaled preset's config loads in transformers with the same rope parameters and
        # rotary table, and sbp grad on it equals torch.
        for preset in SCALED_ROPE_PRESETS:
            check_scaled_rope_init(checker, sbp, golden_root, preset, tmp)
    print(f"check-sbp: {'FAIL' if checker.failures else 'PASS'} "
          f"({checker.failures} failed check(s))")
    return 1 if checker.failures else 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "golden"),
                    help="golden directory (default: tests/reference/golden)")
    ap.add_argument("--check-sbp", metavar="PATH",
                    help="check the sbp CLI at PATH against the goldens in --out; writes nothing")
    ap.add_argument("--verify", action="store_true",
                    help="regenerate into a temporary directory and compare bytes with --out")
    args = ap.parse_args()

    # Determinism: one thread (reduction order), fixed seeds, eager attention.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")

    if args.check_sbp:
        return check_sbp(args.check_sbp, args.out)
    if args.verify:
        return verify(args.out)
    generate_all(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
