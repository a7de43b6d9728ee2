#!/usr/bin/env python3
"""Generates the LoRA goldens: loss and adapter gradients of the REAL peft LoRA model on top of
the REAL transformers Qwen3ForCausalLM, in float64, for SFT and DPO.

Usage (from the repository root):
  scripts/bootstrap --python
  .venv/bin/python tests/reference/generate_lora_goldens.py            # writes golden/lora-tiny-qwen3/
  .venv/bin/python tests/reference/generate_lora_goldens.py --verify   # regenerate, compare bytes
  .venv/bin/python tests/reference/generate_lora_goldens.py --check-sbp build/bin/sbp

The base model is the tiny-qwen3 golden (golden/tiny-qwen3/, made by generate_goldens.py); its
sha256 is recorded in golden.json. peft's get_peft_model wraps it with LoRA adapters (r 4,
alpha 8, all seven linear layers, dropout 0); A and B are then overwritten from a fixed
generator (B non-zero, so that the gradients of A are not trivially zero) and saved with
save_pretrained: adapter_config.json + adapter_model.safetensors, exactly what the runtime
must read. Reloaded from disk with PeftModel.from_pretrained and converted to float64, the
model gives:
  - SFT: the loss of golden/tiny-qwen3/batch.jsonl (HF causal-LM loss, mean over all valid
    targets of the batch) and its gradient w.r.t. every lora_A / lora_B;
  - DPO: for the pairs of dpo_pairs.jsonl, the sigmoid DPO loss with beta DPO_BETA, the policy
    being the adapter model and the reference the base model (peft's disable_adapter), and its
    gradient w.r.t. the adapters;
  - logits of the first SFT sequence with the adapter (a forward check).
--check-sbp PATH runs the other direction: `sbp train` with a lora block on the tiny-qwen3
golden writes a PEFT adapter checkpoint; PeftModel.from_pretrained loads it (every lora tensor
as written), `sbp lora merge` output loads in transformers and its logits equal the peft
model's, and `sbp grad` on the merged model gives the peft model's loss.
See tests/reference/README.md.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import peft
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file

BASE_PRESET = "tiny-qwen3"
NAME = "lora-tiny-qwen3"
RANK = 4
ALPHA = 8.0
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAPTER_SEED = 4242
ADAPTER_STD = 0.05
DPO_BETA = 0.5
DPO_SEED = 777
# (prompt, chosen, rejected) lengths; the prompt of pair 2 is a single token.
DPO_LAYOUT = [(5, 6, 4), (3, 9, 7), (1, 5, 5)]
IGNORE_INDEX = -100


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_base(base_dir, dtype):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        base_dir, dtype=dtype, attn_implementation="eager")
    model.eval()
    return model


def adapter_key(name):
    """peft's parameter name -> the key save_pretrained writes (adapter name removed)."""
    return name.replace(".default", "")


def make_adapter(base_dir, out):
    base = load_base(base_dir, torch.float32)
    config = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0,
                             bias="none", task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, config)
    gen = torch.Generator().manual_seed(ADAPTER_SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(ADAPTER_STD * torch.randn(p.shape, generator=gen, dtype=torch.float32))
    model.save_pretrained(out)
    readme = os.path.join(out, "README.md")
    if os.path.exists(readme):
        os.remove(readme)  # a model card; not part of the golden
    # Reproducible bytes: peft writes target_modules from a set (in hash order) and the base
    # model's path as given; keep the modules sorted (not in layer order, which the reader
    # must not rely on) and the base as a path relative to the golden directory.
    config_path = os.path.join(out, "adapter_config.json")
    with open(config_path) as f:
        written = json.load(f)
    written["target_modules"] = sorted(written["target_modules"])
    written["base_model_name_or_path"] = f"../{BASE_PRESET}"
    with open(config_path, "w") as f:
        json.dump(written, f, indent=2, sort_keys=True)
        f.write("\n")
    # The saved keys are PEFT's, one lora_A and one lora_B per targeted layer.
    saved = load_file(os.path.join(out, "adapter_model.safetensors"))
    expected = {adapter_key(n) for n, _ in model.named_parameters() if "lora_" in n}
    assert set(saved) == expected, sorted(set(saved) ^ expected)
    assert len(saved) == 2 * len(TARGETS) * base.config.num_hidden_layers


def load_adapter_model(base_dir, out):
    base = load_base(base_dir, torch.float32)
    model = peft.PeftModel.from_pretrained(base, out, is_trainable=True)
    saved = load_file(os.path.join(out, "adapter_model.safetensors"))
    for name, p in model.named_parameters():
        if "lora_" in name:
            assert p.requires_grad, name
            assert torch.equal(p.detach(), saved[adapter_key(name)]), name
        else:
            assert not p.requires_grad, name  # the base is frozen
    model = model.double()
    model.eval()  # lora_dropout is 0 anyway
    return model


def adapter_grads(model):
    return {adapter_key(n): p.grad.detach().to(torch.float32).contiguous()
            for n, p in model.named_parameters() if "lora_" in n}


def sft(model, batch):
    model.zero_grad(set_to_none=True)
    total_valid = sum(1 for row in batch for t in row["labels"][1:] if t != IGNORE_INDEX)
    total, first_logits = 0.0, None
    for row in batch:
        ids = torch.tensor([row["input_ids"]], dtype=torch.long)
        labels = torch.tensor(row["labels"], dtype=torch.long)
        logits = model(input_ids=ids, use_cache=False).logits[0]
        if first_logits is None:
            first_logits = logits.detach().to(torch.float32).contiguous()
        total = total + F.cross_entropy(logits[:-1], labels[1:], ignore_index=IGNORE_INDEX,
                                        reduction="sum")
    loss = total / total_valid
    loss.backward()
    return float(loss.detach()), total_valid, adapter_grads(model), first_logits


def make_pairs(vocab_size):
    rng = np.random.Generator(np.random.PCG64(DPO_SEED))
    pairs = []
    for prompt, chosen, rejected in DPO_LAYOUT:
        draw = lambda n: [int(t) for t in rng.integers(0, vocab_size, size=n)]
        pairs.append({"prompt_ids": draw(prompt), "chosen_ids": draw(chosen),
                      "rejected_ids": draw(rejected)})
    return pairs


def response_logprob(model, prompt, response):
    """Sum of log p(token) over the response tokens (the prompt is masked)."""
    ids = torch.tensor([prompt + response], dtype=torch.long)
    logits = model(input_ids=ids, use_cache=False).logits[0]
    logp = torch.log_softmax(logits[:-1], dim=-1)
    targets = ids[0, 1:]
    picked = logp.gather(1, targets[:, None])[:, 0]
    return picked[len(prompt) - 1:].sum()


def dpo(model, pairs):
    model.zero_grad(set_to_none=True)
    with torch.no_grad(), model.disable_adapter():
        refs = [(float(response_logprob(model, p["prompt_ids"], p["chosen_ids"])),
                 float(response_logprob(model, p["prompt_ids"], p["rejected_ids"])))
                for p in pairs]
    total, stats = 0.0, []
    for p, (ref_c, ref_r) in zip(pairs, refs):
        pi_c = response_logprob(model, p["prompt_ids"], p["chosen_ids"])
        pi_r = response_logprob(model, p["prompt_ids"], p["rejected_ids"])
        margin = DPO_BETA * ((pi_c - ref_c) - (pi_r - ref_r))
        total = total + F.softplus(-margin)
        stats.append({"policy_chosen": float(pi_c.detach()), "policy_rejected": float(pi_r.detach()),
                      "reference_chosen": ref_c, "reference_rejected": ref_r,
                      "margin": float(margin.detach())})
    loss = total / len(pairs)
    loss.backward()
    return float(loss.detach()), stats, adapter_grads(model)


def generate(golden_root):
    base_dir = os.path.join(golden_root, BASE_PRESET)
    out = os.path.join(golden_root, NAME)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    make_adapter(base_dir, out)
    model = load_adapter_model(base_dir, out)

    batch = read_jsonl(os.path.join(base_dir, "batch.jsonl"))
    sft_loss, valid, sft_grads, logits = sft(model, batch)
    save_file(dict(sorted(sft_grads.items())), os.path.join(out, "sft_grads.safetensors"),
              metadata={"format": "pt"})
    save_file({"logits": logits}, os.path.join(out, "logits.safetensors"),
              metadata={"format": "pt"})

    pairs = make_pairs(model.config.vocab_size)
    with open(os.path.join(out, "dpo_pairs.jsonl"), "w") as f:
        for p in pairs:
            f.write(json.dumps(p, separators=(",", ":")) + "\n")
    dpo_loss, dpo_stats, dpo_grads = dpo(model, pairs)
    save_file(dict(sorted(dpo_grads.items())), os.path.join(out, "dpo_grads.safetensors"),
              metadata={"format": "pt"})

    golden = {
        "base": BASE_PRESET,
        "base_model_sha256": sha256_of(os.path.join(base_dir, "model.safetensors")),
        "r": RANK,
        "lora_alpha": ALPHA,
        "scaling": ALPHA / RANK,
        "target_modules": TARGETS,
        "adapter_seed": ADAPTER_SEED,
        "sft_batch": f"{BASE_PRESET}/batch.jsonl",
        "sft_loss": sft_loss,
        "sft_valid_targets": valid,
        "dpo_beta": DPO_BETA,
        "dpo_loss": dpo_loss,
        "dpo_pairs": dpo_stats,
        "dtype": "float64",
        "files_dtype": "float32",
        "logits": "logits.safetensors['logits'] = logits of SFT sequence 0 with the adapter",
        "attn_implementation": "eager",
        "transformers_version": transformers.__version__,
        "peft_version": peft.__version__,
        "torch_version": torch.__version__,
    }
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=2)
        f.write("\n")
    print(f"{NAME}: sft loss {sft_loss!r}, dpo loss {dpo_loss!r}")
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        print(f"  {name:28s} {os.path.getsize(path):8d} bytes  {sha256_of(path)}")
    return out


def run_sbp(argv, cwd):
    print("  $ " + " ".join(argv))
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=cwd)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {(p.stdout + p.stderr)[-2000:]}")
    return p.stdout


def check_sbp(sbp, golden_root):
    sbp = os.path.abspath(sbp)
    base_src = os.path.join(golden_root, BASE_PRESET)
    failures = []

    def report(name, ok, detail=""):
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f": {detail}" if detail and not ok else ""))
        if not ok:
            failures.append(name)

    with tempfile.TemporaryDirectory(prefix="sbp-lora-check-") as tmp:
        base = os.path.join(tmp, "base")
        os.makedirs(base)
        for name in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(base_src, name), base)
        batch = read_jsonl(os.path.join(base_src, "batch.jsonl"))
        with open(os.path.join(tmp, "data.jsonl"), "w") as f:
            for row in batch:
                f.write(json.dumps(row) + "\n")
        with open(os.path.join(tmp, "job.yaml"), "w") as f:
            f.write("name: lora-check\nmodel: base\ndata: data.jsonl\nobjective: sft\n"
                    "seq_len: 64\nstreambp: {mode: stream, chunk_tokens: 5, "
                    "logits_chunk_tokens: 7}\n"
                    "train: {steps: 3, sequences_per_step: 5, lr: 2.0e-2, seed: 1}\n"
                    f"lora: {{r: {RANK}, alpha: {ALPHA}, init_seed: 3}}\n"
                    "checkpoint: {dir: run}\n")
        run_sbp([sbp, "train", "job.yaml"], tmp)
        adapter = os.path.join(tmp, "run", "checkpoints", "step-00000003")

        # (a) peft loads the adapter: every lora tensor as written, B moved off zero.
        model = load_adapter_model(base, adapter)
        saved = load_file(os.path.join(adapter, "adapter_model.safetensors"))
        lora_names = [n for n, _ in model.named_parameters() if "lora_" in n]
        report("PeftModel.from_pretrained loads every adapter tensor",
               len(lora_names) == len(saved) == 2 * len(TARGETS) * model.config.num_hidden_layers,
               f"{len(lora_names)} parameters, {len(saved)} tensors")
        moved = sum(float(t.abs().sum()) for k, t in saved.items() if "lora_B" in k)
        report("training moved B away from zero", moved > 0)

        # (b) sbp lora merge loads in transformers; its logits equal the peft model's.
        merged = os.path.join(tmp, "merged")
        run_sbp([sbp, "lora", "merge", "--model", "base", "--adapter", adapter, "--out", "merged"],
                tmp)
        plain = load_base(merged, torch.float64)
        worst = 0.0
        with torch.no_grad():
            for row in batch:
                ids = torch.tensor([row["input_ids"]], dtype=torch.long)
                a = model(input_ids=ids, use_cache=False).logits
                b = plain(input_ids=ids, use_cache=False).logits
                worst = max(worst, float((a - b).norm() / a.norm()))
        report("merged model's logits equal the peft model's (1e-5)", worst <= 1e-5,
               f"relative error {worst:.3g}")

        # (c) sbp grad on the merged model: the peft model's loss.
        out = run_sbp([sbp, "grad", "--model", "merged", "--data", "data.jsonl", "--mode",
                       "stream", "--chunk-tokens", "5", "--logits-chunk-tokens", "7", "--out",
                       os.path.join(tmp, "g.safetensors")], tmp)
        ours = None
        for line in reversed(out.strip().splitlines()):
            try:
                ours = float(json.loads(line)["loss"])
                break
            except (ValueError, KeyError, TypeError):
                continue
        with torch.no_grad():
            want = sft_loss_only(model, batch)
        report("sbp grad loss on the merged model equals the peft model's loss (1e-5)",
               ours is not None and abs(ours - want) <= 1e-5 * abs(want), f"{ours} vs {want}")
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


def sft_loss_only(model, batch):
    """The SFT loss of `batch` (as sft() computes it), without gradients."""
    total_valid = sum(1 for row in batch for t in row["labels"][1:] if t != IGNORE_INDEX)
    total = 0.0
    for row in batch:
        ids = torch.tensor([row["input_ids"]], dtype=torch.long)
        labels = torch.tensor(row["labels"], dtype=torch.long)
        logits = model(input_ids=ids, use_cache=False).logits[0]
        total += float(F.cross_entropy(logits[:-1], labels[1:], ignore_index=IGNORE_INDEX,
                                       reduction="sum"))
    return total / total_valid


def verify(golden_root):
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(golden_root, BASE_PRESET), os.path.join(tmp, BASE_PRESET))
        fresh = generate(tmp)
        committed = os.path.join(golden_root, NAME)
        names = sorted(os.listdir(fresh))
        if names != sorted(os.listdir(committed)):
            print(f"files differ: {names} vs {sorted(os.listdir(committed))}")
            return 1
        bad = [n for n in names if sha256_of(os.path.join(fresh, n)) !=
               sha256_of(os.path.join(committed, n))]
        if bad:
            print(f"regenerated files differ: {bad}")
            return 1
    print("goldens reproduce byte for byte")
    return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "golden"),
                    help="golden directory holding tiny-qwen3/ (default: tests/reference/golden)")
    ap.add_argument("--verify", action="store_true",
                    help="regenerate into a temporary directory and compare bytes with --out")
    ap.add_argument("--check-sbp", metavar="PATH",
                    help="check that peft and transformers load what the sbp CLI at PATH writes")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"peft {peft.__version__}")
    if args.check_sbp:
        return check_sbp(args.check_sbp, args.out)
    if args.verify:
        return verify(args.out)
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
