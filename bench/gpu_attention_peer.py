#!/usr/bin/env python3
"""PyTorch's causal GQA attention, measured as sbp-bench-attention measures
ours: torch.nn.functional.scaled_dot_product_attention(is_causal=True,
enable_gqa=True) in bf16 on the flash backend
(torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)), forward and
backward, one sequence of T tokens, qwen3-8b's shape by default (32 query
heads on 8 KV heads of 128).

Where SDPA has no enable_gqa (PyTorch < 2.5) or its flash kernel does not
take it, the KV heads are repeated up front (repeat_interleave, outside the
time) and the kernel runs on Hq heads: "gqa" says which ("native" or
"expanded"). The backward is then timed on the expanded K and V (the kernel
alone, without the sum back over the repeated heads), which can only favour
PyTorch. On the CPU (a dry run) the flash backend does not exist: SDPA picks
its own there, and "backend" says "default".

FLOP convention (sbp-bench-attention's): only the (query, key) pairs on or
below the diagonal count, T (T + 1) / 2 per query head; forward = 4 d per
pair per query head; backward = 2.5x forward.

Prints one JSON line per op, flushed as soon as it is measured:
  {"op": "attention_forward" | "attention_backward", "impl": "torch_sdpa",
   "seq_len", "heads", "kv_heads", "head_dim", "dtype", "device", "seconds",
   "tflops", "flops", "repeats", "gqa", "backend", "torch"}
"seconds" is the best of --repeats timed calls after --warmup untimed ones,
each between two synchronisations. The backward is
torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) on one forward's
graph: no gradient accumulates, nothing else runs.

  bench/gpu_attention_peer.py --seq-len 32768
  bench/gpu_attention_peer.py --device cpu --dtype fp32 --seq-len 128   (a dry run)
"""
import argparse
import contextlib
import json
import sys
import time


def forward_flops(t, heads, head_dim):
    return 4.0 * head_dim * (t * (t + 1) / 2.0) * heads


BACKWARD_FACTOR = 2.5


def emit(line):
    print(json.dumps(line), flush=True)


def log(message):
    print("gpu_attention_peer: " + message, file=sys.stderr, flush=True)


def flash_context(torch, cuda):
    """The flash backend only, on a GPU; SDPA's own choice on the CPU."""
    if not cuda:
        return contextlib.nullcontext, "default"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return (lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)), "flash"
    except ImportError:  # PyTorch < 2.3
        return (lambda: torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                                         enable_mem_efficient=False)), "flash"


def measure(args, seq_len):
    import torch
    import torch.nn.functional as F

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    hq, hkv, d = args.heads, args.kv_heads, args.head_dim
    gen = torch.Generator(device="cpu").manual_seed(args.seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float32).to(device, dtype)

    # SDPA's layout: [batch, heads, T, d].
    q = randn(1, hq, seq_len, d)
    k = randn(1, hkv, seq_len, d)
    v = randn(1, hkv, seq_len, d)
    dout = randn(1, hq, seq_len, d)
    kernel, backend = flash_context(torch, cuda)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def attend(q_, k_, v_, gqa):
        with kernel():
            if gqa:
                return F.scaled_dot_product_attention(q_, k_, v_, is_causal=True, enable_gqa=True)
            return F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)

    # Whether SDPA takes enable_gqa on this backend, forward and backward: a
    # probe on 256 tokens of the same heads.
    gqa = "native"
    try:
        t = min(seq_len, 256)
        pq, pk, pv = (x[:, :, :t].clone().requires_grad_(True) for x in (q, k, v))
        attend(pq, pk, pv, True).sum().backward()
        sync()
        del pq, pk, pv
    except (TypeError, RuntimeError) as e:  # no enable_gqa, or flash does not take it
        log("enable_gqa not usable (%s): repeating the KV heads" % str(e).splitlines()[0][:200])
        gqa = "expanded"
        k = k.repeat_interleave(hq // hkv, dim=1).contiguous()
        v = v.repeat_interleave(hq // hkv, dim=1).contiguous()
    native = gqa == "native"

    def best_of(fn):
        best = None
        for i in range(args.warmup + args.repeats):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            seconds = time.perf_counter() - start
            if i >= args.warmup:
                best = seconds if best is None else min(best, seconds)
        return best

    base = {"impl": "torch_sdpa", "seq_len": seq_len, "heads": hq, "kv_heads": hkv, "head_dim": d,
            "causal": True, "dtype": args.dtype,
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "repeats": args.repeats, "gqa": gqa, "backend": backend, "torch": torch.__version__}
    flops = forward_flops(seq_len, hq, d)

    # The forward with autograd on, as in training (flash saves its logsumexp).
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    seconds = best_of(lambda: attend(q, k, v, native))
    emit(dict(base, op="attention_forward", seconds=seconds, flops=flops, tflops=flops / seconds / 1e12))

    out = attend(q, k, v, native)
    seconds = best_of(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    flops *= BACKWARD_FACTOR
    emit(dict(base, op="attention_backward", seconds=seconds, flops=flops, tflops=flops / seconds / 1e12))
    del out, q, k, v, dout
    if cuda:
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-len", type=int, action="append", default=[], help="tokens (repeatable; default 32768)")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.heads % args.kv_heads:
        p.error("--kv-heads must divide --heads")
    for seq_len in args.seq_len or [32768]:
        measure(args, seq_len)


if __name__ == "__main__":
    main()
