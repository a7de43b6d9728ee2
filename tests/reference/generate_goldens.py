#!/usr/bin/env python3
"""Generates the PyTorch / Hugging Face golden files the C++ engine tests compare against.

Usage (from the repository root):
  scripts/bootstrap --python
  .venv/bin/python tests/reference/generate_goldens.py [--out tests/reference/golden]
  .venv/bin/python tests/reference/generate_goldens.py --verify          # regenerate, compare bytes
  .venv/bin/python tests/reference/generate_goldens.py --check-sbp build/bin/sbp

For each preset (tiny-qwen3, tiny-llama, tiny-qwen2) it builds the REAL transformers model
class (Qwen3ForCausalLM / LlamaForCausalLM / Qwen2ForCausalLM) in float32 with fixed seeds,
saves it with save_pretrained(safe_serialization=True), reloads it from disk, converts it to
float64 and computes the Hugging Face causal-LM loss of a small batch (position t predicts
token t+1, labels -100 ignored, mean over all valid targets of the whole batch) and the
gradient of that loss w.r.t. every parameter. See tests/reference/README.md for the files.

--check-sbp PATH checks the sbp CLI against the committed goldens instead of writing them.
"""

import argparse
import contextlib
import copy
import hashlib
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


def make_batch():
    rng = np.random.Generator(np.random.PCG64(BATCH_SEED))
    batch = []
    for length, masked in BATCH_LAYOUT:
        ids = [int(t) for t in rng.integers(0, _COMMON["vocab_size"], size=length)]
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


def _rope64_forward(module):
    cfg = module.config
    theta = float(cfg.rope_parameters["rope_theta"])
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = float(module.attention_scaling)

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

    batch = make_batch()
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


def generate_all(out_root):
    os.makedirs(out_root, exist_ok=True)
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
