#!/usr/bin/env python3
"""Markdown for the GPU check's summary.md (tests/gpu/run).

  summarize_gpu_bench.py tests DIR [--allow-skips]
      the gpu tests from their `--gtest_output=json:DIR/NAME.json` files (and
      DIR/NAME.rc, the exit status, or "notrun" for a binary that had no time
      left; DIR/NAME.time, "SECONDS LIMIT"): a table per binary, whose result
      is "passed", "failed" (an assertion, or a crash), "timed out" (stopped
      at its limit: exit 124, or 137 from the KILL after it) or "not run",
      and one closing line "gpu tests: N passed, N failed, N skipped[; N
      binaries timed out][; N binaries not run]". Exit status 1 when a test
      failed, a binary timed out, crashed, left no report or was not run, no
      test ran, or (without --allow-skips) a test skipped.

  summarize_gpu_bench.py bench FILE [--tests DIR]
      the measurements in FILE (JSON lines, in any order):
        `sbp bench` lines (mode, model, seq_len, step_seconds, peak_bytes,
          gflops, peak_gflops, out_of_memory, ...);
        `sbp bench --profile-ops` lines ({"profile_op", "calls", "seconds",
          "share_of_step", "mode", "model", "seq_len", ...});
        sbp-bench-attention and bench/gpu_attention_peer.py lines ({"op":
          "attention_forward"|"attention_backward", "impl": "sbp"|"torch_sdpa",
          "seq_len", "seconds", "tflops", ...});
        bench/gpu_peer.py lines ({"peer": "hf", ...} and the torch matmul peak);
        the run's own: {"planner": {...}} (sbp plan --max-seq-len) and
          {"step": NAME, "rc": N, "outcome", "timed_out": bool, "seconds",
          "limit"} for every step.
      Prints the matmul peak, per model and T our three modes beside HF with
      and without checkpointing (step time, tok/s, TFLOP/s, MFU against the
      highest matmul rate measured in the run, peak memory), the ratios, each
      op's time and share of a profiled step, our attention against PyTorch's
      SDPA, the longest sequence per run with the ratio stream /
      HF-checkpoint, and the targets of the GPU check, each met, missed or
      not run.
"""
import argparse
import glob
import json
import os
import sys

GIB = 1024.0 ** 3
# The shape and length the targets name (--target-model / --target-t change
# them, for a dry run with tiny shapes).
TARGET_MODEL = "qwen3-8b"
TARGET_T = 32768


def fmt_t(t):
    return "%dk" % (t // 1024) if t and t % 1024 == 0 else str(t)


def gib(b):
    if b is None:
        return "-"
    return "%.2f" % (b / GIB) if b >= 0.1 * GIB else "%.3g" % (b / GIB)


# ---- tests ----------------------------------------------------------------------


def timed_out_rc(rc, seconds=None, limit=None):
    """Whether exit status `rc` of a step run under `timeout` means it was
    stopped at its limit (tests/gpu/limits.sh's step_timed_out): 124 (TERM)
    or 137 (the KILL after it); a 137 well before the limit is another kill
    (the OOM killer)."""
    if rc == 124:
        return True
    if rc == 137:
        return seconds is None or limit is None or seconds >= limit - 1
    return False


def read_time(path):
    """(seconds, limit) from a NAME.time file ("SECONDS LIMIT"), or Nones."""
    try:
        parts = open(path).read().split()
        return int(parts[0]), int(parts[1])
    except (OSError, ValueError, IndexError):
        return None, None


def summarize_tests(directory, allow_skips, out=sys.stdout):
    """Returns (ok, counts)."""
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    timed_out_binaries, not_run_binaries = [], []
    problems = []
    rows = []
    rc_files = sorted(glob.glob(os.path.join(directory, "*.rc")))
    for rc_file in rc_files:
        name = os.path.basename(rc_file)[:-3]
        rc = open(rc_file).read().strip()
        seconds, limit = read_time(os.path.join(directory, name + ".time"))
        report = os.path.join(directory, name + ".json")
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        skipped_names, failed_names = [], []
        if rc == "notrun":
            # Not started: no time was left for it before the deadline.
            not_run_binaries.append(name)
            problems.append("%s: not run (no time left before the deadline)" % name)
            rows.append("| %s | not run | | | | | | | no time left before the deadline |" % name)
            continue
        rc_int = int(rc) if rc.lstrip("-").isdigit() else None
        cut = timed_out_rc(rc_int, seconds, limit)
        if os.path.isfile(report):
            try:
                data = json.load(open(report))
            except ValueError:
                data = None
            for suite in (data or {}).get("testsuites", []):
                for test in suite.get("testsuite", []):
                    full = "%s.%s" % (suite.get("name"), test.get("name"))
                    if test.get("result") == "SKIPPED" or test.get("status") == "NOTRUN":
                        counts["skipped"] += 1
                        skipped_names.append(full)
                    elif test.get("failures"):
                        counts["failed"] += 1
                        failed_names.append(full)
                    else:
                        counts["passed"] += 1
            if data is None:
                problems.append("%s: its JSON report is not readable" % name)
        elif cut:
            problems.append("%s: timed out: stopped at its %s s limit (exit %s), no report" % (
                name, limit if limit is not None else "?", rc))
        else:
            problems.append("%s: no report (exit %s: crashed before the end)" % (name, rc))
        if cut and os.path.isfile(report):
            problems.append("%s: timed out at its %s s limit after its report (exit %s)" % (
                name, limit if limit is not None else "?", rc))
        elif rc != "0" and not failed_names and os.path.isfile(report):
            problems.append("%s: exit %s with no failed test (a crash after the tests?)" % (name, rc))
        for k in totals:
            totals[k] += counts[k]
        if cut:
            timed_out_binaries.append(name)
            result = "timed out"
        elif failed_names or rc != "0":
            result = "failed"
        elif counts["passed"]:
            result = "passed"
        else:
            result = "skipped" if counts["skipped"] else "passed"
        note = ""
        if failed_names:
            note = "failed: " + ", ".join(failed_names[:6]) + (" ..." if len(failed_names) > 6 else "")
        elif cut:
            note = "stopped at its time limit (a test hung or the binary needs more than its limit)"
        elif skipped_names:
            note = "skipped: " + ", ".join(skipped_names[:4]) + (" ..." if len(skipped_names) > 4 else "")
        rows.append("| %s | %s | %s | %s | %s | %d | %d | %d | %s |" % (
            name, result, rc, "" if seconds is None else seconds, "" if limit is None else limit,
            counts["passed"], counts["failed"], counts["skipped"], note))
    print("| test binary | result | exit | s | limit s | passed | failed | skipped | |", file=out)
    print("|---|---|---|---|---|---|---|---|---|", file=out)
    for r in rows:
        print(r, file=out)
    print(file=out)
    ran = totals["passed"] + totals["failed"]
    if not rc_files:
        problems.append("no gpu test binary ran")
    elif ran == 0 and not timed_out_binaries and not (allow_skips and totals["skipped"]):
        problems.append("no gpu test ran")
    if totals["skipped"] and not allow_skips:
        problems.append("%d test(s) skipped on a machine with a GPU (CUDA not usable?)" % totals["skipped"])
    for p in problems:
        print("- " + p, file=out)
    if problems:
        print(file=out)
    extra = ""
    if timed_out_binaries:
        extra += "; %d binar%s timed out" % (len(timed_out_binaries), "y" if len(timed_out_binaries) == 1 else "ies")
    if not_run_binaries:
        extra += "; %d binar%s not run" % (len(not_run_binaries), "y" if len(not_run_binaries) == 1 else "ies")
    print("gpu tests: %d passed, %d failed, %d skipped%s" % (totals["passed"], totals["failed"],
                                                           totals["skipped"], extra), file=out)
    ok = not problems and totals["failed"] == 0
    return ok, dict(totals, problems=problems, binaries=len(rc_files), timed_out=timed_out_binaries,
                    not_run=not_run_binaries)


# ---- measurements ------------------------------------------------------------------


def load(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


class Run:
    def __init__(self, rows):
        self.ours = [r for r in rows if "mode" in r and "seq_len" in r and "peer" not in r
                     and "profile_op" not in r]
        self.profile = [r for r in rows if "profile_op" in r]
        self.attention = [r for r in rows if r.get("op") in ("attention_forward", "attention_backward")
                          and "impl" in r and "seq_len" in r]
        self.hf = [r for r in rows if r.get("peer") == "hf" and "seq_len" in r and not r.get("probe")]
        self.probes = [r for r in rows if r.get("peer") == "hf" and r.get("probe")]
        self.hf_max = [r for r in rows if r.get("peer") == "hf" and r.get("measure") == "max_seq_len"]
        self.hf_setup = [r for r in rows if r.get("peer") == "hf" and r.get("measure") == "setup"]
        self.torch_peak = [r for r in rows if r.get("peer") == "torch" and r.get("measure") == "matmul_peak"]
        self.planner = [r for r in rows if "planner" in r]
        self.planned_peaks = {}
        for r in rows:
            c = r.get("planner_check")
            if c:
                # The allocator's share: the plan's peak less the CUDA context.
                self.planned_peaks[(c["preset"], c["seq_len"], c["mode"])] = (
                    c["peak_bytes"] - c.get("device_overhead_bytes", 0))
        self.steps = [r for r in rows if "step" in r and "rc" in r]
        ours_peaks = sorted({r["peak_gflops"] / 1e3 for r in self.ours if r.get("peak_gflops")})
        self.ours_peaks = ours_peaks
        candidates = ours_peaks + [r["tflops"] for r in self.torch_peak]
        self.peak = max(candidates) if candidates else None
        # The lengths the planner named: our lines at those lengths confirm it.
        self.planned = {}
        for p in self.planner:
            for mode, t in (p.get("planner") or {}).items():
                if isinstance(t, int):
                    self.planned[(p.get("preset"), mode)] = dict(p, mode=mode, max_seq_len=t)
        self.confirm_lengths = {(preset, p["max_seq_len"]) for (preset, _), p in self.planned.items()}

    def table_ours(self):
        """Our lines of the shape tables (not the planner's confirming steps)."""
        return [r for r in self.ours if (r["model"], r["seq_len"]) not in self.confirm_lengths]

    def find_ours(self, model, t, mode):
        for r in self.ours:
            if r["model"] == model and r["seq_len"] == t and r["mode"] == mode:
                return r
        return None

    def find_hf(self, model, t, ckpt):
        for r in self.hf:
            if r.get("preset") == model and r["seq_len"] == t and r["checkpointing"] == ckpt:
                return r
        return None

    def find_attention(self, op, impl, t):
        for r in self.attention:
            if r["op"] == op and r["impl"] == impl and r["seq_len"] == t:
                return r
        return None

    def mfu(self, tflops):
        return tflops / self.peak if (self.peak and tflops is not None) else None


def ours_tflops(r):
    return r["gflops"] / 1e3 if r.get("gflops") is not None else None


def tflops(x):
    return "%.0f" % x if x >= 10 else "%.2g" % x


def ratio(a, b):
    return a / b if (a is not None and b) else None


def fixed3(x):
    return "%.3f" % x if x is not None else "-"


def pct(x):
    return "%.1f%%" % (100 * x) if x is not None else "-"


def print_peak(run):
    print("### Matmul peak")
    print()
    if not run.peak:
        print("Not measured.")
        print()
        return
    if run.ours_peaks:
        dtypes = sorted({r.get("dtype", "?") for r in run.ours})
        print("- our backend's GEMM (`sbp bench`; cuBLAS %s 8192^3 on a GPU), per process: %s TFLOP/s" % (
            "/".join(dtypes), ", ".join(tflops(p) for p in run.ours_peaks)))
    for r in run.torch_peak:
        print("- torch.matmul (%s, %d^3, PyTorch %s): %s TFLOP/s" % (r.get("dtype"), r.get("n", 0),
                                                                    r.get("torch", "?"), tflops(r["tflops"])))
    print()
    print("MFU below is model FLOPs (6 per weight per token plus causal attention, 6 L Hq d T^2, "
          "no recompute: worker/engine/engine.cc TrainingFlops) per second over the highest of these, "
          "%s TFLOP/s." % tflops(run.peak))
    print()


def print_shapes(run):
    ours = run.table_ours()
    keys = sorted({(r["model"], r["seq_len"]) for r in ours} |
                  {(r.get("preset"), r["seq_len"]) for r in run.hf if r.get("preset")})
    if not keys:
        print("No step was measured.")
        print()
        return
    print("### One training step (forward + backward, no optimizer step), batch 1")
    print()
    print("| model | T | run | step s | tok/s | TFLOP/s | MFU | peak GiB | planned GiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model, t in keys:
        for mode in ("full", "checkpoint", "stream"):
            r = run.find_ours(model, t, mode)
            if not r:
                continue
            label = "ours %s" % mode
            if mode == "stream":
                label += " (chunks %s/%s)" % (r.get("chunk_tokens", "?"), r.get("logits_chunk_tokens", "?"))
            planned = gib(run.planned_peaks.get((model, t, mode)))
            if r.get("out_of_memory"):
                print("| %s | %s | %s | out of memory | | | | (at %s) | %s |" % (
                    model, fmt_t(t), label, gib(r.get("peak_bytes")), planned))
                continue
            tf = ours_tflops(r)
            print("| %s | %s | %s | %.3f | %.0f | %s | %s | %s | %s |" % (
                model, fmt_t(t), label, r["step_seconds"], r["tokens_per_second"], tflops(tf), pct(run.mfu(tf)),
                gib(r["peak_bytes"]), planned))
        for ckpt in (False, True):
            r = run.find_hf(model, t, ckpt)
            if not r:
                continue
            label = "HF %s (%s)" % ("checkpointing" if ckpt else "no checkpointing", r.get("attn_implementation"))
            if r.get("oom"):
                print("| %s | %s | %s | out of memory | | | | (at %s) | |" % (
                    model, fmt_t(t), label, gib(r.get("max_memory_allocated_bytes"))))
                continue
            print("| %s | %s | %s | %.3f | %.0f | %s | %s | %s | |" % (
                model, fmt_t(t), label, r["step_seconds"], r["tokens_per_second"], tflops(r["tflops"]),
                pct(run.mfu(r["tflops"])), gib(r.get("max_memory_allocated_bytes"))))
    print()
    print("Peak memory: ours is the allocator's peak (bf16 weights, f32 gradients, activations), beside "
          "the planner's prediction for the same run (`sbp plan`, less the CUDA context); HF's is "
          "torch.cuda.max_memory_allocated (bf16 weights, bf16 gradients, activations).")
    print()
    print("| model | T | stream / HF-ckpt time | stream / HF-ckpt peak | stream / our checkpoint time "
          "| HF-ckpt / stream peak |")
    print("|---|---|---|---|---|---|")
    for model, t in keys:
        s = run.find_ours(model, t, "stream")
        c = run.find_ours(model, t, "checkpoint")
        h = run.find_hf(model, t, True)
        ok = lambda r: r is not None and not r.get("out_of_memory") and not r.get("oom")
        if not ok(s):
            continue
        h = h if ok(h) else {}
        c = c if ok(c) else {}
        print("| %s | %s | %s | %s | %s | %s |" % (
            model, fmt_t(t), fixed3(ratio(s["step_seconds"], h.get("step_seconds"))),
            fixed3(ratio(s["peak_bytes"], h.get("max_memory_allocated_bytes"))),
            fixed3(ratio(s["step_seconds"], c.get("step_seconds"))),
            fixed3(ratio(h.get("max_memory_allocated_bytes"), s["peak_bytes"]))))
    print()


def print_profile(run):
    """Each op's time and share of a step profiled by `sbp bench --profile-ops`
    (one table per configuration profiled)."""
    keys = []
    for r in run.profile:
        key = (r.get("model"), r.get("mode"), r.get("seq_len"))
        if key not in keys:
            keys.append(key)
    for model, mode, t in keys:
        rows = [r for r in run.profile if (r.get("model"), r.get("mode"), r.get("seq_len")) == (model, mode, t)]
        print("### Time per op: ours, %s, %s mode, T = %s (one profiled step)" % (model, mode, fmt_t(t)))
        print()
        failed = [r for r in rows if not r.get("profile_op")]
        if failed:
            print("The profiled step did not run: %s" % failed[0].get("error", "?")[:200])
            print()
            continue
        step = rows[0].get("profiled_step_seconds")
        timed = run.find_ours(model, t, mode)
        print("| op | calls | s | share of step |")
        print("|---|---|---|---|")
        ops = sorted((r for r in rows if r["profile_op"] != "(unattributed)"), key=lambda r: -r["seconds"])
        ops += [r for r in rows if r["profile_op"] == "(unattributed)"]
        for r in ops:
            print("| %s | %s | %.4f | %s |" % (r["profile_op"], r.get("calls") or "", r["seconds"],
                                               pct(r.get("share_of_step"))))
        print()
        line = "Profiled step %.3f s" % step if step is not None else "Profiled step ? s"
        if timed and timed.get("step_seconds"):
            line += " against %.3f s timed" % timed["step_seconds"]
        print(line + ": every op waits for the device before and after it (no overlap), so the shares are "
              "of that slower step; \"(unattributed)\" is the time outside the ops.")
        print()


def print_attention(run):
    ts = sorted({r["seq_len"] for r in run.attention})
    if not ts:
        return
    print("### Attention alone: ours against PyTorch SDPA (causal, GQA, one sequence)")
    print()
    print("| op | T | ours s | ours TFLOP/s | SDPA s | SDPA TFLOP/s | ours / SDPA |")
    print("|---|---|---|---|---|---|---|")
    for t in ts:
        for op in ("attention_forward", "attention_backward"):
            o = run.find_attention(op, "sbp", t)
            p = run.find_attention(op, "torch_sdpa", t)
            if not o and not p:
                continue
            print("| %s | %s | %s | %s | %s | %s | %s |" % (
                op[len("attention_"):], fmt_t(t), "%.4f" % o["seconds"] if o else "not run",
                tflops(o["tflops"]) if o else "-", "%.4f" % p["seconds"] if p else "not run",
                tflops(p["tflops"]) if p else "-", fixed3(ratio(o and o["tflops"], p and p["tflops"]))))
    shape = (run.attention[0].get("heads"), run.attention[0].get("kv_heads"), run.attention[0].get("head_dim"),
             run.attention[0].get("dtype"))
    sdpa = [r for r in run.attention if r["impl"] == "torch_sdpa"]
    print()
    print("%s query heads on %s KV heads of %s, %s. FLOPs: only the (query, key) pairs on or below the "
          "diagonal, 4 d per pair per query head forward, 2.5x that backward. SDPA: %s." % (
              shape[0], shape[1], shape[2], shape[3],
              "%s backend, GQA %s, PyTorch %s" % (sdpa[0].get("backend"), sdpa[0].get("gqa"), sdpa[0].get("torch"))
              if sdpa else "not run"))
    print()


def timed_out(run, name_prefix):
    for s in run.steps:
        if s["step"].startswith(name_prefix) and s.get("timed_out"):
            return s
    return None


def max_t(run):
    """{(kind): dict} for ours stream/checkpoint and HF checkpointing."""
    out = {}
    for (preset, mode), p in run.planned.items():
        if preset != TARGET_MODEL:
            continue
        t = p["max_seq_len"]
        confirm = run.find_ours(preset, t, mode)
        cut = timed_out(run, "confirm %s" % mode)
        if confirm and not confirm.get("out_of_memory"):
            status = "confirmed: step %.1f s, peak %s GiB" % (confirm["step_seconds"], gib(confirm["peak_bytes"]))
            confirmed = True
        elif confirm:
            status = "NOT confirmed: out of memory (%s)" % confirm.get("error", "")[:120]
            confirmed = False
        elif cut:
            status = ("not confirmed: the step had not finished when its time ran out (%d s, no out-of-memory "
                      "before that)" % cut.get("seconds", 0))
            confirmed = None
        else:
            status = "not confirmed: no step was run"
            confirmed = None
        how = "%s --memory %s GiB (%s%% margin), planned peak %s GiB" % (
            p.get("how", "sbp plan --max-seq-len"), gib(p.get("memory_bytes")), p.get("margin_percent", "?"),
            gib(p.get("planned_peak_bytes")))
        if mode == "stream":
            how += ", chunks %s/%s" % (p.get("chunk_tokens"), p.get("logits_chunk_tokens"))
        out["ours " + mode] = {"t": t, "how": how,
            "status": status, "confirmed": confirmed, "planned_peak": p.get("planned_peak_bytes")}
    for r in run.hf_max:
        if r.get("preset") != TARGET_MODEL:
            continue
        probes = ", ".join("%s %s" % (fmt_t(p["seq_len"]), "OOM" if p["oom"] else "fits (%s GiB)" %
                                       gib(p.get("max_memory_allocated_bytes"))) for p in r.get("probes", []))
        status = "upper bound %s" % fmt_t(r["upper_bound"]) if r.get("upper_bound") else "no failing probe"
        out["HF checkpointing"] = {"t": r["max_seq_len"], "how": "%d probe(s): %s" % (len(r.get("probes", [])),
                                                                                     probes or "none"),
                                   "status": status, "confirmed": bool(r["max_seq_len"]) or None}
    return out


def print_max_t(run, found):
    print("### Longest sequence, %s, backprop only (weights + gradients + activations)" % TARGET_MODEL)
    print()
    if not found:
        print("Not run.")
        print()
        return
    print("| run | max T | found by | real step at that T |")
    print("|---|---|---|---|")
    for key in ("ours stream", "ours checkpoint", "HF checkpointing"):
        if key in found:
            f = found[key]
            print("| %s | %d | %s | %s |" % (key, f["t"], f["how"], f["status"]))
    print()
    s, h = found.get("ours stream"), found.get("HF checkpointing")
    if s and h and h["t"]:
        print("Ratio stream / HF-checkpointing: %d / %d = %.2fx%s." % (
            s["t"], h["t"], s["t"] / h["t"], "" if s["confirmed"] else " (stream length not confirmed by a step)"))
        print()


def target_lines(run, found, tests):
    lines = []
    if tests is None:
        lines.append(("Every gpu test runs and passes", "not run", ""))
    else:
        ok, c = tests
        verdict = "met" if ok else "missed"
        if ok and c["passed"] == 0:
            verdict = "not run"  # a dry run: every test skipped
        detail = "%d passed, %d failed, %d skipped in %d binaries" % (c["passed"], c["failed"], c["skipped"],
                                                                      c["binaries"])
        if c.get("timed_out"):
            detail += "; timed out: " + ", ".join(c["timed_out"])
        if c.get("not_run"):
            detail += "; not run (no time left): " + ", ".join(c["not_run"])
        lines.append(("Every gpu test runs and passes", verdict, detail))
    s = run.find_ours(TARGET_MODEL, TARGET_T, "stream")
    h = run.find_hf(TARGET_MODEL, TARGET_T, True)
    s_ok = s is not None and not s.get("out_of_memory")
    h_ok = h is not None and not h.get("oom")
    mfu_name = "Stream-mode step MFU >= 40%% (%s, T = %s, attention FLOPs counted)" % (TARGET_MODEL, fmt_t(TARGET_T))
    if s_ok and run.peak:
        m = run.mfu(ours_tflops(s))
        detail = "%.1f%% (%s of %s TFLOP/s, the run's highest matmul rate" % (
            100 * m, tflops(ours_tflops(s)), tflops(run.peak))
        if s.get("mfu") is not None:
            detail += "; the bench line's own: %.1f%% of our GEMM's %s" % (
                100 * s["mfu"], tflops(s["peak_gflops"] / 1e3) if s.get("peak_gflops") else "?")
        detail += ")"
        if s.get("attention_flops") and s.get("model_flops"):
            detail += "; attention is %.0f%% of the %.3g FLOPs counted" % (
                100 * s["attention_flops"] / s["model_flops"], s["model_flops"])
        lines.append((mfu_name, "met" if m >= 0.40 else "missed", detail))
    else:
        lines.append((mfu_name, "missed" if s is not None else "not run", "out of memory" if s is not None else ""))
    o = run.find_attention("attention_backward", "sbp", TARGET_T)
    p = run.find_attention("attention_backward", "torch_sdpa", TARGET_T)
    attention_name = "Our attention backward >= 0.8x PyTorch SDPA (flash) at T = %s, in TFLOP/s" % fmt_t(TARGET_T)
    if o and p:
        r = o["tflops"] / p["tflops"]
        lines.append((attention_name, "met" if r >= 0.8 else "missed",
                      "%.2fx (%s vs %s TFLOP/s)" % (r, tflops(o["tflops"]), tflops(p["tflops"]))))
    else:
        # Ours measured nothing because its step failed or timed out: missed.
        broken = [st for st in run.steps if st["step"].startswith("attention ours") and "(not run" not in st["step"]
                  and st.get("rc") not in (0, None)]
        why = "ours: %s, SDPA: %s" % ("ok" if o else ("timed out" if broken and broken[0].get("timed_out") else
                                                     "failed, exit %s" % broken[0]["rc"] if broken else "not run"),
                                     "ok" if p else "not run")
        lines.append((attention_name, "missed" if (broken and not o) else "not run", why))
    if s_ok and h_ok:
        r = s["step_seconds"] / h["step_seconds"]
        lines.append(("Stream step time <= 1.0x HF-with-checkpointing at T = %s" % fmt_t(TARGET_T), "met" if r <= 1.0 else "missed",
                      "%.2fx (%.2f s vs %.2f s)" % (r, s["step_seconds"], h["step_seconds"])))
        r = ratio(s["peak_bytes"], h.get("max_memory_allocated_bytes"))
        if r is None:
            lines.append(("Stream-mode peak <= 0.5x HF-with-checkpointing at T = %s" % fmt_t(TARGET_T), "not run",
                          "no HF peak memory (not a CUDA run)"))
        else:
            lines.append(("Stream-mode peak <= 0.5x HF-with-checkpointing at T = %s" % fmt_t(TARGET_T), "met" if r <= 0.5 else "missed",
                          "%.2fx (%s vs %s GiB)" % (r, gib(s["peak_bytes"]), gib(h["max_memory_allocated_bytes"]))))
    else:
        why = "ours: %s, HF: %s" % ("ok" if s_ok else ("out of memory" if s else "not run"),
                                   "ok" if h_ok else ("out of memory" if h else "not run"))
        lines.append(("Stream step time <= 1.0x HF-with-checkpointing at T = %s" % fmt_t(TARGET_T),
                      "missed" if (s is not None and not s_ok) else "not run", why))
        lines.append(("Stream-mode peak <= 0.5x HF-with-checkpointing at T = %s" % fmt_t(TARGET_T),
                      "missed" if (s is not None and not s_ok) else "not run", why))
    fs, fh = found.get("ours stream"), found.get("HF checkpointing")
    name = "Max T (backprop only, %s) >= 5x HF-with-checkpointing" % TARGET_MODEL
    if fs and fh and fh["t"]:
        r = fs["t"] / fh["t"]
        verdict = "met" if r >= 5 else "missed"
        if fs["confirmed"] is False:
            verdict = "missed"
        elif fs["confirmed"] is None and verdict == "met":
            verdict = "met by the planner, not confirmed by a step"
        lines.append((name, verdict, "%.2fx (%d vs %d)" % (r, fs["t"], fh["t"])))
    else:
        lines.append((name, "not run", ""))
    return lines


def print_steps(run):
    cut = [s for s in run.steps if s.get("timed_out") or s.get("rc") not in (0, None) or "(not run" in s["step"]]
    if not cut:
        return
    print("### Steps cut or failed")
    print()
    for s in cut:
        if "(not run" in s["step"]:
            print("- %s" % s["step"])
            continue
        if s.get("timed_out"):
            how = "timed out: stopped at its %s s limit" % (s["limit"] if s.get("limit") is not None else "?")
        else:
            how = "failed: exit %s" % s["rc"]
        print("- %s: %s after %s s" % (s["step"], how, s.get("seconds", "?")))
    print()


def summarize_bench(path, tests_dir=None, allow_skips=False):
    rows = load(path) if os.path.isfile(path) else []
    run = Run(rows)
    tests = None
    if tests_dir and glob.glob(os.path.join(tests_dir, "*.rc")):
        with open(os.devnull, "w") as devnull:
            tests = summarize_tests(tests_dir, allow_skips, out=devnull)
    print_peak(run)
    print_shapes(run)
    print_profile(run)
    print_attention(run)
    found = max_t(run)
    print_max_t(run, found)
    print_steps(run)
    print("### Targets (H200)")
    print()
    for name, verdict, detail in target_lines(run, found, tests):
        print("- %s: **%s**%s" % (name, verdict, " (%s)" % detail if detail else ""))
    print()


def main(argv):
    global TARGET_MODEL, TARGET_T
    if argv and argv[0] not in ("tests", "bench", "-h", "--help"):
        argv = ["bench"] + argv  # the older form: summarize_gpu_bench.py FILE
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tests")
    t.add_argument("dir")
    t.add_argument("--allow-skips", action="store_true")
    b = sub.add_parser("bench")
    b.add_argument("file")
    b.add_argument("--tests", dest="tests_dir")
    b.add_argument("--allow-skips", action="store_true")
    b.add_argument("--target-model", default=TARGET_MODEL)
    b.add_argument("--target-t", type=int, default=TARGET_T)
    args = p.parse_args(argv)
    if args.command == "tests":
        ok, _ = summarize_tests(args.dir, args.allow_skips)
        return 0 if ok else 1
    TARGET_MODEL, TARGET_T = args.target_model, args.target_t
    summarize_bench(args.file, args.tests_dir, args.allow_skips)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
