#!/usr/bin/env python3
"""Reads `sbp bench --device cuda:N` JSON lines and prints Markdown: the bf16
cuBLAS peak measured in the same run; per model, sequence length and mode the
step time, tokens/s, model TFLOP/s, MFU against that peak and the allocator's
peak memory; the ratios the engine is held to (stream step / checkpoint step,
peak memory ratios); and the longest sequence per mode that fits the card,
extrapolated from the measured peaks (peak memory is linear in T in every
mode: a + b*T through the two longest measured lengths).

Targets checked: MFU >= 35% in stream mode at T = 16k; stream step time <=
checkpoint step time."""
import json
import sys

GIB = 1024.0 ** 3


def fit_max_len(points, capacity):
    """points: [(T, peak_bytes)] sorted by T; returns the T where the line through the last two reaches capacity."""
    if len(points) < 2:
        return None
    (t0, p0), (t1, p1) = points[-2], points[-1]
    if t1 == t0 or p1 <= p0:
        return None
    slope = (p1 - p0) / (t1 - t0)
    return int(t1 + (capacity - p1) / slope)


def main(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    if not rows:
        print("No benchmark lines were produced.")
        return
    peaks = sorted({r["peak_gflops"] for r in rows if "peak_gflops" in r})
    if peaks:
        print("Measured cuBLAS matmul peak (8192^3, {}): {:.0f} TFLOP/s (per process: {}).".format(
            rows[0].get("dtype", "?"), max(peaks) / 1e3, ", ".join("%.0f" % (p / 1e3) for p in peaks)))
        print()
    print("| model | T | mode | step s | tok/s | TFLOP/s | MFU | peak GiB | activation GiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["model"], r["seq_len"], r["mode"])):
        if r.get("out_of_memory"):
            print("| {model} | {seq_len} | {mode} | out of memory | | | | | |".format(**r))
            continue
        print("| {model} | {seq_len} | {mode} | {step_seconds:.3f} | {tokens_per_second:.0f} | "
              "{tf:.0f} | {mfu:.1%} | {p:.2f} | {a:.2f} |".format(
                  tf=r["gflops"] / 1e3, p=r["peak_bytes"] / GIB,
                  a=r["activation_peak_bytes"] / GIB, **r))
    print()
    ok = {(r["model"], r["seq_len"], r["mode"]): r for r in rows if not r.get("out_of_memory")}
    print("| model | T | stream / checkpoint step time | checkpoint / stream peak | full / stream peak |")
    print("|---|---|---|---|---|")
    for model, t in sorted({(m, t) for (m, t, _) in ok}):
        s, c, f = (ok.get((model, t, mode)) for mode in ("stream", "checkpoint", "full"))
        if not s:
            continue
        time_ratio = "%.3f" % (s["step_seconds"] / c["step_seconds"]) if c else "-"
        ckpt_peak = "%.2f" % (c["peak_bytes"] / s["peak_bytes"]) if c else "-"
        full_peak = "%.2f" % (f["peak_bytes"] / s["peak_bytes"]) if f else "-"
        print("| {} | {} | {} | {} | {} |".format(model, t, time_ratio, ckpt_peak, full_peak))
    print()
    print("Longest sequence per mode under the card's memory (extrapolated):")
    print()
    print("| model | mode | GiB per 1k tokens | fixed GiB | max T |")
    print("|---|---|---|---|---|")
    for model in sorted({r["model"] for r in rows}):
        for mode in ("stream", "checkpoint", "full"):
            pts = sorted((t, r["peak_bytes"]) for (m, t, md), r in ok.items() if m == model and md == mode)
            caps = [r["device_memory_bytes"] for r in rows if "device_memory_bytes" in r]
            if len(pts) < 2 or not caps:
                continue
            max_t = fit_max_len(pts, caps[0])
            (t0, p0), (t1, p1) = pts[-2], pts[-1]
            slope = (p1 - p0) / (t1 - t0)
            print("| {} | {} | {:.3f} | {:.2f} | {} |".format(
                model, mode, slope * 1024 / GIB, (p1 - slope * t1) / GIB,
                "%dk" % (max_t // 1024) if max_t else "-"))
    print()
    print("Targets:")
    for (model, t, mode), r in sorted(ok.items()):
        if mode == "stream" and t == 16384:
            print("- {} stream T=16k MFU {:.1%} (target >= 35%): {}".format(
                model, r["mfu"], "met" if r["mfu"] >= 0.35 else "NOT met"))
            c = ok.get((model, t, "checkpoint"))
            if c:
                print("- {} T=16k stream step {:.3f} s vs checkpoint {:.3f} s (target stream <= checkpoint): {}".format(
                    model, r["step_seconds"], c["step_seconds"],
                    "met" if r["step_seconds"] <= c["step_seconds"] else "NOT met"))


if __name__ == "__main__":
    main(sys.argv[1])
