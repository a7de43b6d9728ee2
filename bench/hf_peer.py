#!/usr/bin/env python3
"""The CPU peer that `sbp bench` is compared with in the same run: Hugging Face
transformers' Qwen3ForCausalLM loaded from the same model directory (`sbp model
init --preset bench-qwen3 --seed 1 --out DIR`), fp32, SDPA attention, one
training step = forward + backward over one sequence of T tokens (labels = the
tokens, HF shifts them), no optimizer step, with and without
gradient_checkpointing_enable().

Every measurement runs in a fresh process, so that one measurement's peak RSS
does not include another's. Like `sbp bench`, each process runs untimed
warm-up steps, then resets the peak RSS (/proc/self/clear_refs) and times the
steps that follow (the best is reported). Gradients stay allocated between
steps (zero_grad(set_to_none=False)), as `sbp bench` keeps its gradient
buffers. One JSON line per measurement, flushed at once:

  {"peer": "hf", "seq_len", "checkpointing", "step_seconds", "tokens_per_second",
   "gflops", "rss_peak_bytes" (VmHWM over the timed steps), "rss_lifetime_peak_bytes"
   (ru_maxrss: warm-up and loading included), "rss_start_bytes" (VmRSS when the
   timed steps start), "loss", "torch", "transformers", "blas", "cpu_capability",
   "threads", ...}

A process the kernel kills (out of memory) or that runs past --timeout gives a
line with "failed": true and the reason.

  .venv/bin/python bench/hf_peer.py --model DIR --seq-len 4096 --seq-len 8192
  .venv/bin/python bench/hf_peer.py --model DIR --seq-len 4096 --checkpointing on --steps 2

Runs with the project's virtual environment (`scripts/bootstrap --python`:
torch and transformers pinned in tests/reference/requirements.txt), offline.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings

# transformers 5 renames gradient_checkpointing_enable and warns on each call;
# the old name is the one users call.
warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*deprecated")


def emit(line):
    print(json.dumps(line), flush=True)


def status_bytes(key):
    """A "Key: N kB" line of /proc/self/status, in bytes (0 when absent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def model_flops(c, tokens):
    """TrainingFlops of worker/engine/engine.cc: 6 flops per matmul weight per
    token (LM head included) plus 6*L*heads*head_dim*T^2 for causal attention."""
    hidden, inter = c["hidden_size"], c["intermediate_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    per_layer = hidden * q + 2 * hidden * kv + q * hidden + 3 * hidden * inter
    layers = c["num_hidden_layers"]
    matmul_params = layers * per_layer + c["vocab_size"] * hidden
    return 6.0 * tokens * matmul_params + 6.0 * layers * q * float(tokens) * tokens


def blas_name(torch):
    """"mkl 2024.2-Product" from torch's build configuration, else its BLAS_INFO."""
    config = torch.__config__.show()
    for line in config.splitlines():
        if "Math Kernel Library" in line:
            return "mkl " + line.split("Version")[-1].strip().split()[0]
    if "BLAS_INFO=" in config:
        return config.split("BLAS_INFO=")[1].split(",")[0]
    return "unknown"


def measure(args):
    """One (seq_len, checkpointing) measurement in this process."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    line = {"peer": "hf", "model": args.model, "seq_len": args.seq_len,
            "checkpointing": args.checkpointing == "on", "dtype": "fp32",
            "attn_implementation": "sdpa", "torch": torch.__version__,
            "transformers": transformers.__version__, "blas": blas_name(torch),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads()}
    start = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="sdpa")
    model.config.use_cache = False
    model.train()
    if args.checkpointing == "on":
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    line["model_class"] = type(model).__name__
    line["load_seconds"] = round(time.perf_counter() - start, 3)
    line["checkpointing_active"] = bool(model.is_gradient_checkpointing)
    gen = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, config["vocab_size"], (1, args.seq_len), generator=gen)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return float(loss.detach())

    for _ in range(args.warmup):
        step()
        model.zero_grad(set_to_none=False)
    line["rss_start_bytes"] = status_bytes("VmRSS")
    line["rss_peak_reset"] = reset_peak_rss()
    best, loss = None, None
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        seconds = time.perf_counter() - t0
        best = seconds if best is None else min(best, seconds)
        model.zero_grad(set_to_none=False)
    flops = model_flops(config, args.seq_len)
    line.update(step_seconds=best, tokens_per_second=args.seq_len / best,
                gflops=flops / best / 1e9, model_flops=flops, loss=loss,
                steps=args.steps, warmup_steps=args.warmup,
                rss_peak_bytes=status_bytes("VmHWM"),
                rss_lifetime_peak_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                parameters=sum(p.numel() for p in model.parameters()))
    emit(line)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face model directory (sbp model init)")
    p.add_argument("--seq-len", type=int, action="append", required=True,
                   help="tokens in the sequence (repeatable)")
    p.add_argument("--checkpointing", choices=["off", "on", "both"], default="both")
    p.add_argument("--steps", type=int, default=1, help="timed steps (the best is reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per measurement")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.seq_len = args.seq_len[0]
        measure(args)
        return
    modes = ["off", "on"] if args.checkpointing == "both" else [args.checkpointing]
    for seq_len in args.seq_len:
        for mode in modes:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--model", args.model,
                   "--seq-len", str(seq_len), "--checkpointing", mode, "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--seed", str(args.seed),
                   "--threads", str(args.threads)]
            failure = None
            try:
                r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=args.timeout)
                lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
                if r.returncode == 0 and lines:
                    print(lines[-1], flush=True)
                    continue
                failure = ("killed by signal {} (out of memory?)".format(-r.returncode)
                           if r.returncode < 0 else "exit status {}".format(r.returncode))
            except subprocess.TimeoutExpired:
                failure = "ran past --timeout {} s".format(args.timeout)
            emit({"peer": "hf", "model": args.model, "seq_len": seq_len,
                  "checkpointing": mode == "on", "failed": True, "error": failure})


if __name__ == "__main__":
    main()
