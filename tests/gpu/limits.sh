# shellcheck shell=bash disable=SC2034  # its variables are used by the scripts that source it
# Time limits of the GPU check's steps, sourced by tests/gpu/run and tested on
# the CPU by tests/gpu/limits_test (ctest gpu_run_limits). Plain functions of
# their arguments (the time left is passed in), so that a test can play a
# whole run's schedule without waiting for it.
#
# Every step runs under `timeout --kill-after=$LIMIT_KILL_AFTER LIMIT`: it
# ends by LIMIT + LIMIT_KILL_AFTER seconds at the latest, so a limit is never
# more than the time left less LIMIT_MARGIN (the kill and the records after
# it), and 0, "do not start", when not even one second is left that way.
#
# The gpu tests: each binary gets the seconds it needs from the table below
# (a default for one not listed), cut to what is left. The e2e tests
# (e2e_*) are long and run last; their needs are held back up front: a test
# before them is cut (to LIMIT_FLOOR seconds at worst, or not started) rather
# than eat into them, so they get all they need while the deadline allows,
# whatever the order and however slow the others are. The other tests also
# leave GPU_TESTS_MEASURE_RESERVE seconds to the measurements after the tests
# while they can (below that they still get LIMIT_FLOOR seconds each).
#
# The needs: what each binary takes on an H200 with room to spare, from its
# own waits and sizes. No GPU run has timed them yet: the run writes every
# test's seconds into tests.log and bench.jsonl ({"step": "gpu test NAME",
# "seconds", "limit", ...}); update the table from there.

LIMIT_FLOOR=10        # the least a step gets while the deadline allows
LIMIT_KILL_AFTER=5    # seconds from timeout's TERM to its KILL
LIMIT_MARGIN=8        # kept past a limit: the kill, then the records
GPU_TEST_NEED_DEFAULT=45
GPU_TESTS_MEASURE_RESERVE=${GPU_TESTS_MEASURE_RESERVE:-200}

declare -gA GPU_TEST_NEEDS=(
  [kernels_cuda_smoke_gpu_test]=15
  [kernels_cuda_runtime_gpu_test]=30
  [kernels_backend_ops_gpu_test]=60 # every op against the CPU backend's, CPU references included
  [kernels_embedding_backward_gpu_test]=30
  [kernels_flash_attention_occupancy_gpu_test]=30
  [engine_engine_gpu_test]=60
  [engine_engine_packing_gpu_test]=45
  [engine_engine_offload_gpu_test]=60 # 64 MiB copies; 4k-token passes in three tiers, f32 and bf16
  [dist_nccl_gpu_test]=45
  [dist_nccl_all_to_all_gpu_test]=20 # one rank per device, blocks up to 1 MiB
  [engine_engine_sequence_parallel_gpu_test]=45 # P = 2 and 4 thread ranks on one device, 3 presets x 4 modes
  [train_trainer_gpu_test]=60 # 20 AdamW steps on the CPU and the GPU, one-rank NCCL
  [train_lora_gpu_test]=45
  [decode_decode_gpu_test]=30 # greedy decoding on cuda:0 against the CPU, f32 and bf16
  # A cluster (coordinator, a GPU and a CPU worker), a bf16 job trained to a
  # checkpoint, a refused submit: it waits up to 60 s for the workers and
  # 120 s for the job; a healthy machine registers them in seconds.
  [e2e_gpu_job_gpu_test]=150
)

# gpu_test_need NAME: seconds the test binary NAME needs.
gpu_test_need() {
  echo "${GPU_TEST_NEEDS[$1]:-$GPU_TEST_NEED_DEFAULT}"
}

# gpu_test_reserved NAME: whether NAME's need is held back up front.
gpu_test_reserved() {
  [[ "$1" == e2e_* ]]
}

# step_limit NEED LEFT [RESERVE] [HELD]: the limit of a step that needs NEED
# seconds with LEFT seconds before the deadline: NEED, cut so that RESERVE
# seconds stay for the steps after it (but not below LIMIT_FLOOR) and so that
# HELD seconds (held back for later steps) and LIMIT_MARGIN always do.
# 0: no time for it (do not start it: `timeout 0` would mean no limit).
step_limit() {
  local need=$1 left=$2 reserve=${3:-0} held=${4:-0} cap l
  cap=$((left - held - LIMIT_MARGIN))
  l=$((left - held - reserve))
  [ "$l" -lt "$LIMIT_FLOOR" ] && l=$LIMIT_FLOOR
  [ "$l" -gt "$need" ] && l=$need
  [ "$l" -gt "$cap" ] && l=$cap
  [ "$l" -lt 1 ] && l=0
  echo "$l"
}

# gpu_test_limit NAME LEFT [LATER...]: the limit of gpu test NAME with LEFT
# seconds before the deadline and the tests LATER still to run after it. Each
# reserved test among LATER holds its need and LIMIT_MARGIN.
gpu_test_limit() {
  local name=$1 left=$2 held=0 reserve=$GPU_TESTS_MEASURE_RESERVE t
  shift 2
  for t in "$@"; do
    if [ "$t" != "$name" ] && gpu_test_reserved "$t"; then
      held=$((held + $(gpu_test_need "$t") + LIMIT_MARGIN))
    fi
  done
  # A reserved test may use the measurements' share: it was held for it.
  gpu_test_reserved "$name" && reserve=0
  step_limit "$(gpu_test_need "$name")" "$left" "$reserve" "$held"
}

# step_timed_out RC [SECONDS LIMIT]: whether a step that exited RC under
# `timeout` was stopped at its limit: 124 (TERM) or 137 (KILL after
# LIMIT_KILL_AFTER). A 137 well before the limit (SECONDS < LIMIT - 1) is a
# kill from elsewhere (the kernel's OOM killer), not the limit.
step_timed_out() {
  case "$1" in
    124) return 0 ;;
    137) [ -z "${2:-}" ] || [ -z "${3:-}" ] || [ "$2" -ge $(($3 - 1)) ] ;;
    *) return 1 ;;
  esac
}

# step_outcome RC [SECONDS LIMIT]: "passed", "timed out" or "failed".
step_outcome() {
  if [ "$1" -eq 0 ]; then
    echo passed
  elif step_timed_out "$@"; then
    echo "timed out"
  else
    echo failed
  fi
}

# step_record FILE NAME RC SECONDS [LIMIT]: one JSON line into FILE for the
# summary: {"step", "rc", "outcome", "timed_out", "seconds", "limit"}; a NAME
# with "(not run" in it is a step that was not started: outcome "not run".
step_record() {
  local file=$1 name=$2 rc=$3 seconds=$4 limit=${5:-} timed_out=false outcome
  step_timed_out "$rc" "$seconds" "$limit" && timed_out=true
  outcome=$(step_outcome "$rc" "$seconds" "$limit")
  [[ "$name" == *"(not run"* ]] && outcome="not run"
  name=${name//\\/\\\\}
  name=${name//\"/\\\"}
  echo "{\"step\": \"$name\", \"rc\": $rc, \"outcome\": \"$outcome\", \"timed_out\": $timed_out," \
    "\"seconds\": $seconds, \"limit\": ${limit:-null}}" >> "$file"
}
