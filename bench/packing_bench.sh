#!/usr/bin/env bash
# Packed SFT against unpacked sequences of the same tokens: bench-qwen3, T
# tokens as DOCS equal documents, (a) packed into one sequence with document
# offsets, (b) as DOCS separate sequences, and (c) one sequence without
# document boundaries (every token sees every earlier one) for reference.
# One process each, best of STEPS timed steps after a warm-up; prints the JSON
# lines of `sbp bench` and the ratios.
#   bench/packing_bench.sh [BUILD_DIR] [T] [DOCS] [MODE] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
T=${2:-4096}
DOCS=${3:-16}
MODE=${4:-stream}
STEPS=${5:-2}
OUT=$(mktemp)
for LAYOUT in "--packed-docs $DOCS" "--separate-docs $DOCS" ""; do
  # shellcheck disable=SC2086
  "$BUILD_DIR/bin/sbp" bench --preset bench-qwen3 --seq-len "$T" --mode "$MODE" \
      --steps "$STEPS" $LAYOUT | tee -a "$OUT"
done
python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
packed, separate, whole = rows
for name, r in (("packed", packed), ("separate", separate), ("one document", whole)):
    print(f"{name:13s} step {r['step_seconds']:.2f} s  {r['tokens_per_second']:.0f} tok/s  "
          f"{r['gflops']:.1f} GFLOP/s  peak {r['peak_bytes'] / 2**30:.3f} GiB  loss {r['loss']:.6f}")
print(f"separate / packed step time: {separate['step_seconds'] / packed['step_seconds']:.2f}")
print(f"one document / packed step time: {whole['step_seconds'] / packed['step_seconds']:.2f}")
PY
rm -f "$OUT"
