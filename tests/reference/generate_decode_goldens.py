#!/usr/bin/env python3
"""Generates the greedy-decoding goldens: the tokens that the REAL Hugging Face `generate`
chooses, greedily and with its KV cache, from the committed tiny-qwen3 / tiny-llama models.

Usage (from the repository root):
  scripts/bootstrap --python
  .venv/bin/python tests/reference/generate_decode_goldens.py            # writes golden/decode/
  .venv/bin/python tests/reference/generate_decode_goldens.py --verify   # regenerate, compare bytes

For each preset the model directory golden/<preset>/ (written by generate_goldens.py) is loaded
with AutoModelForCausalLM.from_pretrained in float32 with eager attention, and for prompts of
1, 5, 17 and 40 tokens (ids from a fixed numpy seed) `model.generate` runs greedily
(do_sample False, one beam, no EOS, no logits processors: the raw and the processed scores are
asserted equal) for MAX_NEW_TOKENS tokens. For every new token the script recomputes the logits
of the full sequence without a cache and records the float32 log-softmax of the chosen token,
and asserts that the chosen token is that forward's argmax with a margin over the runner-up
logit above MIN_GAP, so that fp32 rounding differences of another implementation cannot flip a
choice. A batch of three more prompts (3, 11 and 26 tokens) is recorded the same way; the C++
test generates them in one call, and each must give its own greedy continuation.
golden/decode/<preset>.json holds the versions, the preset, max_new_tokens and, per case,
prompt, new_ids, logprobs and min_gap. See tests/reference/README.md.
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile

import numpy as np
import torch
import transformers

PRESETS = ("tiny-qwen3", "tiny-llama")
MAX_NEW_TOKENS = 24
MIN_GAP = 1e-3       # every chosen token's logit exceeds the runner-up's by more than this
CACHE_TOLERANCE = 1e-4  # generate's cached logits vs the full forward's (a self-check)

# (prompt length, numpy seed of its ids), the same prompts for both presets. The seeds were
# 1000 + i and 2000 + i; two were replaced (next seed + 10 that passes in both presets) because
# tiny-qwen3's greedy continuation had a top-1/top-2 gap below MIN_GAP:
#   17 tokens: seed 1002 -> 1012 (1002 had a gap of 5.3e-4),
#   40 tokens: seed 1003 -> 1013 (1003 had a gap of 8.2e-4).
CASES = [(1, 1000), (5, 1001), (17, 1012), (40, 1013)]
# Generated together in one call by the C++ test.
BATCH = [(3, 2000), (11, 2001), (26, 2002)]


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def make_prompt(length, seed, vocab_size):
    rng = np.random.Generator(np.random.PCG64(seed))
    return [int(t) for t in rng.integers(0, vocab_size, size=length)]


def f32(x):
    """A float32 value as the shortest decimal that reads back as the same float32."""
    return float(repr(np.float32(x)).removeprefix("np.float32(").removesuffix(")"))


def greedy_config():
    """Greedy decoding with nothing that could stop it early or change the argmax."""
    return transformers.GenerationConfig(
        max_new_tokens=MAX_NEW_TOKENS, min_length=0, min_new_tokens=None,
        do_sample=False, num_beams=1, num_beam_groups=1,
        temperature=None, top_k=None, top_p=None,
        repetition_penalty=1.0, no_repeat_ngram_size=0, encoder_no_repeat_ngram_size=0,
        bad_words_ids=None, forced_bos_token_id=None, forced_eos_token_id=None,
        suppress_tokens=None, begin_suppress_tokens=None, sequence_bias=None,
        eos_token_id=None, bos_token_id=None, pad_token_id=0, stop_strings=None,
        use_cache=True, return_dict_in_generate=True, output_scores=True, output_logits=True)


def decode_case(model, prompt):
    ids = torch.tensor([prompt], dtype=torch.long)
    # An explicit mask: without one generate infers it from pad_token_id (0), which would
    # mask the prompt's own 0 tokens.
    out = model.generate(ids, attention_mask=torch.ones_like(ids),
                         generation_config=greedy_config())
    new_ids = [int(t) for t in out.sequences[0, len(prompt):]]
    assert len(new_ids) == MAX_NEW_TOKENS, (len(new_ids), "stopped early")
    assert len(out.scores) == MAX_NEW_TOKENS
    for raw, processed in zip(out.logits, out.scores):
        assert torch.equal(raw, processed), "a logits processor changed the scores"

    # The full sequence without a cache: the logits at position p predict token p + 1.
    full = out.sequences
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=torch.ones_like(full),
                       use_cache=False).logits[0].float()
    logprobs, gaps, cache_err = [], [], 0.0
    for i, token in enumerate(new_ids):
        row = logits[len(prompt) - 1 + i]
        top2 = torch.topk(row, 2)
        assert int(top2.indices[0]) == token, (i, token, int(top2.indices[0]))
        gaps.append(float(top2.values[0] - top2.values[1]))
        logprobs.append(f32(torch.log_softmax(row, dim=-1)[token]))
        cache_err = max(cache_err, float((out.logits[i][0].float() - row).abs().max()))
    assert min(gaps) > MIN_GAP, (prompt, gaps)
    assert cache_err <= CACHE_TOLERANCE, cache_err
    return dict(prompt=prompt, new_ids=new_ids, logprobs=logprobs, min_gap=f32(min(gaps))), \
        cache_err


def generate_preset(preset, model_root, out_dir):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(model_root, preset), dtype=torch.float32, attn_implementation="eager")
    model.eval()
    assert next(model.parameters()).dtype == torch.float32
    vocab = model.config.vocab_size
    torch.manual_seed(0)  # nothing is sampled; fixed anyway
    cases, batch, worst_cache = [], [], 0.0
    for target, layout in ((cases, CASES), (batch, BATCH)):
        for length, seed in layout:
            case, err = decode_case(model, make_prompt(length, seed, vocab))
            target.append(case)
            worst_cache = max(worst_cache, err)
    golden = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "preset": preset,
        "model_class": type(model).__name__,
        "max_new_tokens": MAX_NEW_TOKENS,
        "min_gap_asserted": MIN_GAP,
        "logprob": "log_softmax of the full-sequence float32 forward's logits, of the new token",
        "cases": cases,
        "batch": batch,
    }
    path = os.path.join(out_dir, f"{preset}.json")
    with open(path, "w") as f:
        f.write(dump(golden))
    print(f"{preset} ({type(model).__name__}): generate's cached logits vs full forward: "
          f"max abs {worst_cache:.2e}")
    for name, group in (("case", cases), ("batch", batch)):
        for c in group:
            print(f"  {name} prompt {len(c['prompt']):>2} tokens: min gap {c['min_gap']:.4g}, "
                  f"logprobs [{min(c['logprobs']):.3f}, {max(c['logprobs']):.3f}], "
                  f"new ids {c['new_ids'][:8]}...")
    return path


def dump(golden):
    """JSON with one line per list, so the files stay small and diffable."""
    lines = ["{"]
    items = list(golden.items())
    for k, (key, value) in enumerate(items):
        comma = "," if k + 1 < len(items) else ""
        if key in ("cases", "batch"):
            lines.append(f"  {json.dumps(key)}: [")
            for j, case in enumerate(value):
                body = ", ".join(f"{json.dumps(n)}: {json.dumps(v, separators=(',', ':'))}"
                                 for n, v in case.items())
                lines.append("    {" + body + "}" + ("," if j + 1 < len(value) else ""))
            lines.append("  ]" + comma)
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == golden
    return text


def generate_all(model_root, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    paths = [generate_preset(p, model_root, out_dir) for p in PRESETS]
    print("wrote:")
    for path in paths:
        print(f"  {os.path.getsize(path):>7}  {sha256_of(path)}  {os.path.relpath(path)}")
    return paths


def verify(model_root, out_dir):
    with tempfile.TemporaryDirectory(prefix="sbp-decode-goldens-") as tmp:
        fresh = generate_all(model_root, tmp)
        bad = []
        for path in fresh:
            committed = os.path.join(out_dir, os.path.basename(path))
            if not os.path.exists(committed) or sha256_of(committed) != sha256_of(path):
                bad.append(os.path.basename(path))
    if bad:
        print(f"verify: FAIL {bad} differ from {out_dir}")
        return 1
    print(f"verify: PASS ({len(fresh)} files byte-identical to {out_dir})")
    return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(here, "golden"),
                    help="directory holding tiny-qwen3/ and tiny-llama/ "
                         "(default: tests/reference/golden)")
    ap.add_argument("--out", default=os.path.join(here, "golden", "decode"),
                    help="output directory (default: tests/reference/golden/decode)")
    ap.add_argument("--verify", action="store_true",
                    help="regenerate into a temporary directory and compare bytes with --out")
    args = ap.parse_args()

    # Determinism: one thread (reduction order), fixed seeds, eager attention, float32.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    if args.verify:
        return verify(args.models, args.out)
    generate_all(args.models, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
