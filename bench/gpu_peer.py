#!/usr/bin/env python3
"""The peer that `sbp bench` is compared with on the same GPU, in the same run:
Hugging Face transformers' causal LM (Qwen3ForCausalLM for the qwen3 presets)
with random weights, built from a config object (no download), one training
step = forward + backward, no optimizer step (the StreamBP paper's backprop
measurement), with gradient_checkpointing_enable() and without it.

Prints one JSON line per measurement, flushed at once so that a run cut by a
time limit keeps what was measured:
  {"peer": "hf", "preset", "seq_len", "checkpointing", "step_seconds",
   "max_memory_allocated_bytes", "tokens_per_second", "oom", ...}
and, with --peak, the bf16 matmul rate of the device first:
  {"peer": "torch", "measure": "matmul_peak", "tflops", ...}
and, with --max-seq-len-probes N, after the listed lengths, a short search for
the longest sequence that fits with checkpointing (N probes at most, starting
from the peak memory measured at the longest length that fitted):
  {"peer": "hf", "measure": "max_seq_len", "max_seq_len", "upper_bound", ...}

The model shape is the preset's own, taken from our binary: `sbp model init
--preset NAME --config-only` where sbp has it; else the preset table in
worker/model/model_config.cc (the Qwen3Shape(...) rows); else `sbp model init`
with weights (small presets only). --config FILE takes a config.json instead.

  bench/gpu_peer.py --preset qwen3-8b --seq-len 32768 --seq-len 16384 --peak
  bench/gpu_peer.py --preset tiny-qwen3 --seq-len 64 --device cpu   (a dry run)

Runs with the device's own python3, PyTorch and transformers, offline.
"""
import argparse
import gc
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

# transformers 5 renames gradient_checkpointing_enable (activation_checkpointing_enable)
# and warns on every call; the old name is what users call and works in 4.x too.
warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*deprecated")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def emit(line):
    print(json.dumps(line), flush=True)


def log(message):
    print("gpu_peer: " + message, file=sys.stderr, flush=True)


# ---- the model's config.json -------------------------------------------------


def find_sbp(explicit):
    candidates = [explicit, os.environ.get("SBP_BIN"), shutil.which("sbp"),
                  os.path.join(ROOT, ".gpu-stage", "bin", "sbp"), os.path.join(ROOT, "build", "bin", "sbp")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def config_from_sbp(sbp, preset, with_weights):
    """config.json written by `sbp model init` (config only where supported)."""
    help_text = subprocess.run([sbp, "model", "init", "--help"], capture_output=True, text=True).stdout
    config_only = "--config-only" in help_text
    if not config_only and not with_weights:
        return None
    out = tempfile.mkdtemp(prefix="gpu-peer-")
    try:
        cmd = [sbp, "model", "init", "--preset", preset, "--out", out]
        cmd += ["--config-only"] if config_only else ["--dtype", "bf16"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("gpu_peer: {} failed: {}".format(" ".join(cmd), r.stderr.strip()))
        with open(os.path.join(out, "config.json")) as f:
            return json.load(f)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def config_from_source(preset):
    """The preset's row in worker/model/model_config.cc, when it is a
    Qwen3Shape(vocab, hidden, layers, heads, kv_heads, head_dim, intermediate,
    tied) call; the other fields are the ones Qwen3Shape sets."""
    path = os.path.join(ROOT, "worker", "model", "model_config.cc")
    if not os.path.isfile(path):
        return None
    text = open(path).read()
    signature = re.search(r"ModelConfig Qwen3Shape\(([^)]*)\)\s*\{(.*?)\n\}", text, re.S)
    row = re.search(r'presets\.emplace_back\("' + re.escape(preset) + r'",\s*Qwen3Shape\(([^)]*)\)\)', text)
    if not signature or not row:
        return None
    names = [p.split()[-1] for p in signature.group(1).split(",")]
    values = [v.strip() for v in row.group(1).split(",")]
    if len(names) != len(values):
        return None
    args = dict(zip(names, values))
    body = signature.group(2)

    def field(name, default):
        m = re.search(r"c\." + name + r"\s*=\s*([^;]+);", body)
        return float(m.group(1)) if m else default

    ints = {k: int(v) for k, v in args.items() if re.fullmatch(r"-?\d+", v)}
    try:
        layers = ints["layers"]
        config = {
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "vocab_size": ints["vocab"], "hidden_size": ints["hidden"],
            "intermediate_size": ints["intermediate"], "num_hidden_layers": layers,
            "num_attention_heads": ints["heads"], "num_key_value_heads": ints["kv_heads"],
            "head_dim": ints["head_dim"], "hidden_act": "silu", "initializer_range": 0.02,
            "max_position_embeddings": int(field("max_position_embeddings", 40960)),
            "rms_norm_eps": field("rms_norm_eps", 1e-6), "rope_theta": field("rope_theta", 1e6),
            "tie_word_embeddings": args.get("tied") == "true",
            "attention_bias": False, "attention_dropout": 0.0, "use_sliding_window": False,
            "sliding_window": None, "max_window_layers": layers,
            "layer_types": ["full_attention"] * layers,
        }
    except KeyError:
        return None
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": config["rope_theta"]}
    return config


def load_config(args):
    if args.config:
        with open(args.config) as f:
            return json.load(f), "file " + args.config
    sbp = find_sbp(args.sbp)
    if sbp:
        config = config_from_sbp(sbp, args.preset, with_weights=False)
        if config:
            return config, "sbp model init --config-only"
    config = config_from_source(args.preset)
    if config:
        return config, "worker/model/model_config.cc"
    if sbp:
        config = config_from_sbp(sbp, args.preset, with_weights=True)
        if config:
            return config, "sbp model init"
    raise SystemExit("gpu_peer: no config for preset {!r}: pass --config or --sbp".format(args.preset))


def model_flops(c, tokens):
    """The same count as TrainingFlops (worker/engine/engine.cc): 6 flops per
    matmul weight per token, and causal attention 6*L*heads*head_dim*T^2."""
    hidden, inter = c["hidden_size"], c["intermediate_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    per_layer = hidden * q + 2 * hidden * kv + q * hidden + 3 * hidden * inter
    layers = c["num_hidden_layers"]
    matmul_params = layers * per_layer + c["vocab_size"] * hidden
    return 6.0 * tokens * matmul_params + 6.0 * layers * q * float(tokens) * tokens


# ---- measurements ---------------------------------------------------------------


class Peer:
    def __init__(self, args, config_dict):
        import torch
        import transformers

        self.torch = torch
        self.args = args
        self.config_dict = config_dict
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
        self.attn = args.attn
        if self.attn == "auto":
            self.attn = "flash_attention_2" if (self.cuda and importlib.util.find_spec("flash_attn")) else "sdpa"
        fields = {k: v for k, v in config_dict.items() if k not in ("architectures", "model_type",
                                                                   "torch_dtype", "dtype")}
        config = transformers.AutoConfig.for_model(config_dict.get("model_type", "qwen3"), **fields)
        config.use_cache = False
        start = time.time()
        torch.manual_seed(args.seed)
        with torch.device(self.device):
            try:
                self.model = transformers.AutoModelForCausalLM.from_config(
                    config, attn_implementation=self.attn, dtype=self.dtype)
            except TypeError:  # transformers 4.x names it torch_dtype
                self.model = transformers.AutoModelForCausalLM.from_config(
                    config, attn_implementation=self.attn, torch_dtype=self.dtype)
        self.model.to(self.device, self.dtype)
        self.model.train()
        self.sync()
        self.parameters = sum(p.numel() for p in self.model.parameters())
        self.weight_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        self.base = {"peer": "hf", "preset": args.preset or args.config, "model": type(self.model).__name__,
                     "attn_implementation": self.attn, "dtype": args.dtype,
                     "device": self.device_name(), "torch": torch.__version__,
                     "transformers": transformers.__version__}
        emit(dict(self.base, measure="setup", parameters=self.parameters, weight_bytes=self.weight_bytes,
                  build_seconds=round(time.time() - start, 3), config_source=args.config_source,
                  device_memory_bytes=self.capacity()))

    def device_name(self):
        return self.torch.cuda.get_device_name(self.device) if self.cuda else "cpu"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def capacity(self):
        return self.torch.cuda.mem_get_info(self.device)[1] if self.cuda else None

    def set_checkpointing(self, on):
        if on:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            self.model.gradient_checkpointing_disable()

    def step(self, ids):
        loss = self.model(input_ids=ids, labels=ids).loss
        loss.backward()
        return float(loss.detach())

    def measure(self, seq_len, checkpointing, warmup=True, probe=False):
        torch = self.torch
        line = dict(self.base, seq_len=seq_len, checkpointing=checkpointing, warmup=warmup)
        if probe:
            line["probe"] = True
        self.set_checkpointing(checkpointing)
        gen = torch.Generator(device="cpu").manual_seed(self.args.seed)
        ids = torch.randint(0, self.config_dict["vocab_size"], (1, seq_len), generator=gen).to(self.device)
        oom = None
        seconds = None
        loss = None
        try:
            for i in range(2 if warmup else 1):
                self.model.zero_grad(set_to_none=True)
                gc.collect()
                if self.cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats(self.device)
                self.sync()
                start = time.perf_counter()
                loss = self.step(ids)
                self.sync()
                seconds = time.perf_counter() - start
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
            # Near the card's capacity cuBLAS or the caching allocator may
            # fail with a plain RuntimeError instead: that is a result too.
            text = str(e)
            if not (isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in text
                    or "ALLOC_FAILED" in text):
                raise
            oom = text.splitlines()[0][:300] if text else "out of memory"
        peak = torch.cuda.max_memory_allocated(self.device) if self.cuda else None
        self.model.zero_grad(set_to_none=True)
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
        flops = model_flops(self.config_dict, seq_len)
        line.update(oom=oom is not None, max_memory_allocated_bytes=peak, model_flops=flops,
                    checkpointing_active=bool(self.model.is_gradient_checkpointing))
        if oom is not None:
            line["error"] = oom
        else:
            line.update(step_seconds=seconds, tokens_per_second=seq_len / seconds,
                        tflops=flops / seconds / 1e12, loss=loss)
            if self.args.peak_tflops:
                line["mfu"] = line["tflops"] / self.args.peak_tflops
        emit(line)
        return line

    def matmul_peak(self, n, iters=10):
        torch = self.torch
        a = torch.randn(n, n, device=self.device, dtype=self.dtype)
        b = torch.randn(n, n, device=self.device, dtype=self.dtype)
        for _ in range(3):
            torch.matmul(a, b)
        self.sync()
        best = None
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(iters):
                torch.matmul(a, b)
            self.sync()
            seconds = (time.perf_counter() - start) / iters
            best = seconds if best is None else min(best, seconds)
        tflops = 2.0 * n ** 3 / best / 1e12
        emit({"peer": "torch", "measure": "matmul_peak", "dtype": self.args.dtype, "n": n,
              "tflops": tflops, "device": self.device_name(), "torch": torch.__version__})
        del a, b
        if self.cuda:
            torch.cuda.empty_cache()
        return tflops

    def max_seq_len(self, fitted, probes, granule):
        """Longest T with checkpointing, in `probes` real steps: the first at
        the length where the line through the model state and the peak
        measured at the longest fitting length reaches the card's capacity,
        then up by 5% while it fits, or halfway back once one did not."""
        capacity = self.capacity()
        lo, hi = 0, None
        first = None
        if fitted:
            best = max(fitted, key=lambda r: r["seq_len"])
            lo = best["seq_len"]
            fixed = 2 * self.weight_bytes  # weights and their gradients
            slope = (best["max_memory_allocated_bytes"] - fixed) / best["seq_len"]
            if capacity and slope > 0:
                first = int((0.97 * capacity - fixed) / slope)
        if first is None:
            first = max(2 * lo, granule)
        down = lambda t: max(granule, int(t) // granule * granule)
        t = down(first)
        tried = []

        def report(searching):
            # After every probe: a time limit that ends the search keeps what
            # it found (the summary takes the last line).
            emit(dict(self.base, measure="max_seq_len", checkpointing=True, max_seq_len=lo,
                      upper_bound=hi, probes=list(tried), device_memory_bytes=capacity,
                      searching=searching))

        for _ in range(probes):
            if t <= lo or (hi is not None and t >= hi):
                break
            r = self.measure(t, True, warmup=False, probe=True)
            tried.append({"seq_len": t, "oom": r["oom"], "max_memory_allocated_bytes": r["max_memory_allocated_bytes"]})
            if r["oom"]:
                hi = t
            else:
                lo = t
            report(searching=True)
            t = down(lo * 1.05) if hi is None else down((lo + hi) / 2)
            if hi is not None and hi - lo <= granule:
                break
        report(searching=False)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", help="one of our presets (qwen3-0.6b, qwen3-8b, tiny-qwen3, ...)")
    source.add_argument("--config", help="a Hugging Face config.json")
    p.add_argument("--sbp", help="the sbp binary that names the preset's shape (default: found)")
    p.add_argument("--seq-len", type=int, action="append", default=[], help="tokens (repeatable, in order)")
    p.add_argument("--checkpointing", choices=["both", "on", "off"], default="both",
                   help="with gradient checkpointing, without, or both (on first)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--attn", default="auto", help="auto (flash_attention_2 when installed, else sdpa), sdpa, eager")
    p.add_argument("--peak", action="store_true", help="measure the matmul rate first (bf16 8192^3 on a GPU)")
    p.add_argument("--peak-n", type=int, default=8192)
    p.add_argument("--max-seq-len-probes", type=int, default=0,
                   help="then search the longest T with checkpointing in this many steps")
    p.add_argument("--granule", type=int, default=1024, help="the search's resolution in tokens")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    args.peak_tflops = None

    config, args.config_source = load_config(args)
    peer = Peer(args, config)
    if args.peak:
        args.peak_tflops = peer.matmul_peak(args.peak_n)
    modes = {"both": [True, False], "on": [True], "off": [False]}[args.checkpointing]
    plan = [(t, c) for t in args.seq_len for c in modes]
    fitted = []
    searched = not args.max_seq_len_probes
    for seq_len, checkpointing in plan:
        r = peer.measure(seq_len, checkpointing)
        if checkpointing and not r["oom"] and r["max_memory_allocated_bytes"]:
            fitted.append(r)
        if checkpointing and not searched:
            # The search comes right after the first (most important) length
            # with checkpointing: a time limit then cuts the other
            # measurements rather than the search.
            peer.max_seq_len(fitted, args.max_seq_len_probes, args.granule)
            searched = True
    if not searched:
        peer.max_seq_len(fitted, args.max_seq_len_probes, args.granule)

if __name__ == "__main__":
    main()
