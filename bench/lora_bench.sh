#!/usr/bin/env bash
# LoRA against full fine-tuning on bench-qwen3: peak memory and step time of
# one training step (forward + backward, no optimizer) per backward mode, one
# process per (T, mode, run). LoRA is rank R on all seven linear layers; its
# peak holds the frozen weights, the adapters and their gradients, where full
# fine-tuning holds the weights and their gradients. Prints the JSON lines of
# `sbp bench`, then a Markdown table.
#   bench/lora_bench.sh [BUILD_DIR] [R] [T ...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
RANK=${2:-16}
shift 2 || true
LENGTHS=("$@")
[ ${#LENGTHS[@]} -gt 0 ] || LENGTHS=(2048 4096)
OUT=$(mktemp)
for T in "${LENGTHS[@]}"; do
  for MODE in full checkpoint stream; do
    "$BUILD_DIR/bin/sbp" bench --preset bench-qwen3 --seq-len "$T" --mode "$MODE" | tee -a "$OUT"
    "$BUILD_DIR/bin/sbp" bench --preset bench-qwen3 --seq-len "$T" --mode "$MODE" \
      --lora-r "$RANK" | tee -a "$OUT"
  done
done
python3 - "$OUT" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    rows[(j["seq_len"], j["mode"], j.get("lora_r", 0) > 0)] = j
gib = 1 << 30
print("| T | mode | full FT peak GiB | LoRA peak GiB | peak LoRA / full | full FT step s | LoRA step s | step LoRA / full |")
print("|---|---|---|---|---|---|---|---|")
for (T, mode, lora), j in sorted(rows.items()):
    if lora or (T, mode, True) not in rows:
        continue
    l = rows[(T, mode, True)]
    print(f"| {T} | {mode} | {j['peak_bytes'] / gib:.3f} | {l['peak_bytes'] / gib:.3f} | "
          f"{l['peak_bytes'] / j['peak_bytes']:.2f} | {j['step_seconds']:.2f} | "
          f"{l['step_seconds']:.2f} | {l['step_seconds'] / j['step_seconds']:.2f} |")
PY
rm -f "$OUT"
