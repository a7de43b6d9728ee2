#!/usr/bin/env bash
# Data in: `sbp data prepare` throughput and the trainer's resident memory
# with token shards against the same examples as token JSONL.
#   bench/data_bench.sh [BUILD_DIR] [TEXT_MB] [WORKER_RUNS]   (default: build 200 "1 all")
# Writes TEXT_MB of {"text"} lines drawn from the repository's Markdown,
# prepares them with the shipped tokenizer (tests/tokenizer/tiny-bpe) on one
# worker (tokens/s per core) and on every core, as shards and as token JSONL,
# then trains 2 steps of the tiny chat model (examples/configs/
# tiny-chat-qwen3.json) from each and reports the peak RSS (VmHWM) of
# `sbp train`. Prints one JSON line per measurement. Needs the data tools
# (scripts/bootstrap --data-tools or --python).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
TEXT_MB=${2:-200}
WORKER_RUNS=${3:-1 all}   # prepare the shards on one worker, on every core, or both
SBP="$BUILD_DIR/bin/sbp"
PY=${SBP_PYTHON:-$( [ -x .venv-data/bin/python ] && echo .venv-data/bin/python || echo .venv/bin/python )}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$PY" - "$WORK/text.jsonl" "$TEXT_MB" <<'PY'
import glob, json, random, sys
words = " ".join(open(p, encoding="utf-8").read() for p in sorted(glob.glob("*.md"))).split()
rng, size, limit = random.Random(1), 0, int(sys.argv[2]) << 20
with open(sys.argv[1], "w") as f:
    while size < limit:
        n = rng.randint(50, 400)
        i = rng.randrange(len(words) - n)
        line = json.dumps({"text": " ".join(words[i:i + n])}) + "\n"
        f.write(line)
        size += len(line)
PY

prepare() {  # NAME WORKERS ARGS...
  local name=$1 workers=$2
  shift 2
  local start end summary
  start=$(date +%s.%N)
  summary=$("$PY" tools/data_prepare/sbp_data_prepare.py --tokenizer tests/tokenizer/tiny-bpe \
    --no-progress --workers "$workers" "$WORK/text.jsonl" "$@")
  end=$(date +%s.%N)
  "$PY" -c '
import json, sys
s = json.loads(sys.argv[1]); seconds = float(sys.argv[3]) - float(sys.argv[2]); w = int(sys.argv[4])
print(json.dumps({"bench": "prepare", "run": sys.argv[5], "workers": w, "input_bytes": int(sys.argv[6]),
  "tokens": s["tokens"], "examples": s["examples"], "seconds": round(seconds, 2),
  "tokens_per_second": round(s["tokens"] / seconds), "tokens_per_second_per_core": round(s["tokens"] / seconds / w)}))
' "$summary" "$start" "$end" "$workers" "$name" "$(stat -c %s "$WORK/text.jsonl")"
}
for run in $WORKER_RUNS; do
  workers=$run
  [ "$run" = all ] && workers=$(nproc)
  prepare "shards-$run" "$workers" --shards --out "$WORK/data.shard"
done
prepare jsonl-all "$(nproc)" --out "$WORK/data.tokens.jsonl"

"$SBP" model init --config examples/configs/tiny-chat-qwen3.json --seed 1 --out "$WORK/model" >/dev/null
train() {  # NAME DATA
  cat > "$WORK/$1.yaml" <<YAML
name: data-bench-$1
model: $WORK/model
data: $2
objective: sft
seq_len: 512
truncation: truncate
streambp: {mode: stream, chunk_tokens: 128, logits_chunk_tokens: 128}
train: {steps: 2, sequences_per_step: 4, lr: 1.0e-3, seed: 1}
checkpoint: {dir: $WORK/runs/$1}
YAML
  local start end log
  start=$(date +%s.%N)
  log=$( { /usr/bin/time -f 'maxrss_kb %M' "$SBP" train "$WORK/$1.yaml" >/dev/null; } 2>&1 )
  end=$(date +%s.%N)
  "$PY" -c '
import json, sys
rss = int([l for l in sys.argv[1].splitlines() if l.startswith("maxrss_kb")][-1].split()[1]) * 1024
print(json.dumps({"bench": "train_rss", "data": sys.argv[2], "data_bytes": int(sys.argv[3]),
  "peak_rss_bytes": rss, "seconds": round(float(sys.argv[5]) - float(sys.argv[4]), 2)}))
' "$log" "$1" "$(stat -c %s "$2")" "$start" "$end"
}
train shards "$WORK/data.shard"
train jsonl "$WORK/data.tokens.jsonl"
