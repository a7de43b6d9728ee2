#!/usr/bin/env python3
"""Reads `sbp bench` JSON lines and prints a Markdown table plus the ratios
the engine is held to: peak(checkpoint)/peak(stream), the same for activation
memory alone, step_seconds(stream)/step_seconds(checkpoint), and how closely
the process RSS follows the allocator's peak: `RSS/peak` is the peak RSS of
the timed steps minus the RSS the allocator did not hold when they started
(code, libraries, OpenBLAS's per-thread buffers; the `runtime` column), over
the allocator's peak; `raw` is the whole process's peak RSS over it."""
import json
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    by = {(r["seq_len"], r["mode"]): r for r in rows}
    gib = 1024.0 ** 3
    print("| T | mode | peak GiB | activation GiB | RSS peak GiB | runtime GiB | RSS/peak | raw | "
          "step s | tok/s | GFLOP/s | of sgemm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        untracked = r.get("rss_untracked_bytes", 0)
        tracked = r.get("rss_tracked_peak_bytes", r["rss_peak_bytes"])
        print("| {seq_len} | {mode} | {p:.3f} | {a:.3f} | {rss:.3f} | {u:.3f} | {ratio:.3f} | "
              "{raw:.3f} | {step_seconds:.2f} | {tokens_per_second:.0f} | {gflops:.1f} | "
              "{mfu_vs_sgemm:.2f} |".format(
                  p=r["peak_bytes"] / gib, a=r["activation_peak_bytes"] / gib,
                  rss=r["rss_peak_bytes"] / gib, u=untracked / gib,
                  ratio=tracked / r["peak_bytes"], raw=r["rss_peak_bytes"] / r["peak_bytes"], **r))
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
            "worst_rss_over_peak": max(
                x.get("rss_tracked_peak_bytes", x["rss_peak_bytes"]) / x["peak_bytes"]
                for x in rows if x["seq_len"] == t),
        }
        f = by.get((t, "full"))
        if f:
            summary["peak_ratio_full_over_stream"] = f["peak_bytes"] / s["peak_bytes"]
        print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1])
