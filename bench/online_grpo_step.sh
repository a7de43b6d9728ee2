#!/usr/bin/env bash
# One online GRPO step on bench-qwen3 (`sbp train`, the CPU): --prompts
# prompts of 64 random tokens, --group completions each sampled for exactly
# --new-tokens tokens (an EOS id outside what a random model samples), scored
# by token_match, then the StreamBP training passes. Prints the step's line of
# metrics.jsonl (rollout_seconds, train_seconds, rollout_tokens_per_second,
# peak_bytes, ...) with the machine's figures.
#
#   bench/online_grpo_step.sh [--build DIR] [--prompts 8] [--group 4] [--new-tokens 2048]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build; PROMPTS=8; GROUP=4; NEW=2048
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD_DIR=$2; shift 2 ;;
    --prompts) PROMPTS=$2; shift 2 ;;
    --group) GROUP=$2; shift 2 ;;
    --new-tokens) NEW=$2; shift 2 ;;
    *) echo "online_grpo_step: unknown option $1" >&2; exit 2 ;;
  esac
done
SBP="$(pwd)/$BUILD_DIR/bin/sbp"
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
"$SBP" model init --preset bench-qwen3 --seed 1 --out model > /dev/null
python3 - "$PROMPTS" > prompts.jsonl <<'PY'
import json, random, sys
rng = random.Random(1)
for _ in range(int(sys.argv[1])):
    print(json.dumps({"prompt_ids": [rng.randrange(1000, 100000) for _ in range(64)],
                      "answer": [1, 2, 3]}))
PY
cat > job.yaml <<YAML
name: online-step
model: model
data: prompts.jsonl
objective: grpo
seq_len: $((NEW + 64))
streambp: {mode: stream, chunk_tokens: 512, logits_chunk_tokens: 512}
train: {steps: 1, sequences_per_step: $PROMPTS, lr: 1.0e-5, seed: 1}
grpo:
  beta: 0.0
  rollout: {group_size: $GROUP, max_new_tokens: $NEW, temperature: 1.0, eos_token_id: 0}
  reward: {function: token_match}
checkpoint: {every_steps: 0, dir: run}
YAML
/usr/bin/time -f '%M' -o rss.txt "$SBP" train job.yaml > train.log 2>&1 || { cat train.log >&2; exit 1; }
python3 - "$(cat rss.txt)" "$PROMPTS" "$GROUP" "$NEW" <<'PY'
import json, sys
line = json.loads(open("run/metrics.jsonl").readline())
line.update({"bench": "online_grpo_step", "prompts": int(sys.argv[2]), "group_size": int(sys.argv[3]),
             "new_tokens": int(sys.argv[4]), "rss_peak_bytes": int(sys.argv[1]) * 1024,
             "cpu": next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))})
print(json.dumps(line))
PY
