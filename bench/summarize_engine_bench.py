#!/usr/bin/env python3
"""Reads `sbp bench` JSON lines and prints a Markdown table plus the ratios
the engine is held to: peak(checkpoint)/peak(stream), the same for activation
memory alone, step_seconds(stream)/step_seconds(checkpoint), and how closely
the process RSS follows the allocator's peak."""
import json
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    by = {(r["seq_len"], r["mode"]): r for r in rows}
    gib = 1024.0 ** 3
    print("| T | mode | peak GiB | activation GiB | RSS peak GiB | RSS/peak | step s | tok/s | GFLOP/s | of sgemm |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| {seq_len} | {mode} | {p:.3f} | {a:.3f} | {rss:.3f} | {ratio:.3f} | {step_seconds:.2f} | "
              "{tokens_per_second:.0f} | {gflops:.1f} | {mfu_vs_sgemm:.2f} |".format(
                  p=r["peak_bytes"] / gib, a=r["activation_peak_bytes"] / gib,
                  rss=r["rss_peak_bytes"] / gib, ratio=r["rss_peak_bytes"] / r["peak_bytes"], **r))
    print()
    for t in sorted({r["seq_len"] for r in rows}):
        c, s = by.get((t, "checkpoint")), by.get((t, "stream"))
        if not c or not s:
            continue
        summary = {
            "seq_len": t,
            "peak_ratio_checkpoint_over_stream": c["peak_bytes"] / s["peak_bytes"],
            "activation_ratio_checkpoint_over_stream":
                c["activation_peak_bytes"] / max(s["activation_peak_bytes"], 1),
            "time_ratio_stream_over_checkpoint": s["step_seconds"] / c["step_seconds"],
        }
        f = by.get((t, "full"))
        if f:
            summary["peak_ratio_full_over_stream"] = f["peak_bytes"] / s["peak_bytes"]
        print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1])
