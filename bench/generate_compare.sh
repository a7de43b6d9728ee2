#!/usr/bin/env bash
# Rollout throughput: `sbp generate` (the engine's KV-cache decoder) against
# Hugging Face generate() with its KV cache, on the same CPU in the same run,
# the same model directory and prompts: a batch of --batch prompts of
# --prompt-tokens random tokens, each decoded for exactly --new-tokens tokens
# (greedy, no EOS). One JSON line per measurement, then the ratio and how many
# of the greedy tokens the two agree on (fp32 rounding lets long greedy runs
# part ways at near ties).
#
#   bench/generate_compare.sh [--build DIR] [--model DIR] [--batch 8] [--prompt-tokens 32]
#                             [--new-tokens 1024] [--repeats 2]
#
# Default model: `sbp model init --preset bench-qwen3 --seed 1` in a temporary
# directory. Needs the project virtual environment (`scripts/bootstrap --python`).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build; MODEL=""; BATCH=8; PROMPT=32; NEW=1024; REPEATS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD_DIR=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --prompt-tokens) PROMPT=$2; shift 2 ;;
    --new-tokens) NEW=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    *) echo "generate_compare: unknown option $1" >&2; exit 2 ;;
  esac
done
PYTHON=${PYTHON:-.venv/bin/python}
SBP="$BUILD_DIR/bin/sbp"
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
if [ -z "$MODEL" ]; then
  MODEL="$WORK/model"
  "$SBP" model init --preset bench-qwen3 --seed 1 --out "$MODEL" > /dev/null
fi
"$PYTHON" - "$BATCH" "$PROMPT" "$MODEL" > "$WORK/prompts.jsonl" <<'PY'
import json, random, sys
batch, length, model = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
vocab = json.load(open(model + "/config.json"))["vocab_size"]
rng = random.Random(1)
for _ in range(batch):
    print(json.dumps({"prompt_ids": [rng.randrange(vocab) for _ in range(length)]}))
PY
for round in $(seq "$REPEATS"); do
  "$SBP" generate --model "$MODEL" --prompts "$WORK/prompts.jsonl" --max-new-tokens "$NEW" \
      --temperature 0 --ignore-eos --out "$WORK/ours.jsonl" 2> "$WORK/ours.err"
  tail -n 1 "$WORK/ours.err" | "$PYTHON" -c \
      'import json,sys; d=json.loads(sys.stdin.read()); d["peer"]="ours"; print(json.dumps(d))' \
      | tee -a "$WORK/lines"
  "$PYTHON" bench/hf_generate_peer.py --model "$MODEL" --prompts "$WORK/prompts.jsonl" \
      --max-new-tokens "$NEW" --keep-ids > "$WORK/hf.json"
  "$PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); d.pop("completions"); print(json.dumps(d))' \
      "$WORK/hf.json" | tee -a "$WORK/lines"
done
"$PYTHON" - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
lines = [json.loads(l) for l in open(work + "/lines")]
ours = max(l["tokens_per_second"] for l in lines if l["peer"] == "ours")
hf = max(l["tokens_per_second"] for l in lines if l["peer"] == "hf")
mine = [json.loads(l)["completion_ids"] for l in open(work + "/ours.jsonl")]
theirs = json.load(open(work + "/hf.json"))["completions"]
same = sum(a == b for x, y in zip(mine, theirs) for a, b in zip(x, y))
first = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), len(x)) for x, y in zip(mine, theirs)]
print(json.dumps({"summary": "generate", "ours_tokens_per_second": ours,
                  "hf_tokens_per_second": hf, "ratio": round(ours / hf, 3), "target": 1.5,
                  "met": ours / hf >= 1.5, "same_tokens": same,
                  "tokens": sum(len(x) for x in mine), "first_difference": first}))
PY
