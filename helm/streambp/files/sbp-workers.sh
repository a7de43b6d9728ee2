#!/bin/bash
# sbp-workers: the command of a whole-node worker pod (worker.wholeNode). Runs
# the commands given as its arguments, separated by "---" (one sbp-worker per
# GPU of the node), side by side in one container, so that they share its
# /dev/shm and NCCL between them can use NVLink and shared memory.
#
#   sbp-workers sbp-worker --device=cuda:0 ... --- sbp-worker --device=cuda:1 ...
#
# - SIGTERM or SIGINT goes on to every command (an sbp-worker finishes its
#   step and writes a checkpoint), then sbp-workers waits for all of them.
# - When any command exits, the others get SIGTERM the same way and
#   sbp-workers exits with that first command's status, so that the pod
#   restarts as a whole (a job's ranks on this node fail over together).
# - Without OMP_NUM_THREADS, each command gets an equal share of the CPUs the
#   container may use (OMP_NUM_THREADS, which sbp-worker's default --threads
#   follows), so that N workers do not each start a thread per CPU.
set -u

if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501)); then
  echo "sbp-workers: needs bash 5.1 or newer (wait -n -p), not $BASH_VERSION" >&2
  exit 2
fi
if [ $# -eq 0 ]; then
  echo "usage: sbp-workers COMMAND [ARG...] [--- COMMAND [ARG...]]..." >&2
  exit 2
fi

# The commands: starts[i] and lengths[i] index into args.
args=("$@")
starts=()
lengths=()
start=0
for ((i = 0; i <= ${#args[@]}; i++)); do
  if [ "$i" -eq "${#args[@]}" ] || [ "${args[i]}" = --- ]; then
    if [ "$i" -eq "$start" ]; then
      echo "sbp-workers: an empty command (two '---' in a row, or one at either end)" >&2
      exit 2
    fi
    starts+=("$start")
    lengths+=($((i - start)))
    start=$((i + 1))
  fi
done
count=${#starts[@]}

if [ -z "${OMP_NUM_THREADS:-}" ] && [ "$count" -gt 1 ]; then
  cpus=$(nproc 2>/dev/null || echo 1)
  share=$((cpus / count))
  export OMP_NUM_THREADS=$((share > 0 ? share : 1))
fi

pids=()
stopping=0
stop() {  # SIGTERM to every command still running
  stopping=1
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
}
trap 'echo "sbp-workers: SIGTERM: stopping ${#pids[@]} worker(s)" >&2; stop' TERM
trap 'echo "sbp-workers: SIGINT: stopping ${#pids[@]} worker(s)" >&2; stop' INT

for ((i = 0; i < count; i++)); do
  [ "$stopping" = 1 ] && break  # a signal came while starting them
  "${args[@]:${starts[i]}:${lengths[i]}}" &
  pids+=($!)
done
echo "sbp-workers: started ${#pids[@]} worker(s) (pids ${pids[*]}," \
  "OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset})" >&2

# Wait for every command; the first to exit stops the others.
left=${#pids[@]}
first=""
while [ "$left" -gt 0 ]; do
  unset done_pid
  wait -n -p done_pid
  status=$?
  if [ -z "${done_pid:-}" ]; then
    # A trapped signal interrupted the wait (its trap ran stop), or nothing
    # is left to wait for.
    jobs -pr | grep -q . || break
    continue
  fi
  left=$((left - 1))
  if [ -z "$first" ]; then
    first=$status
    if [ "$stopping" = 0 ]; then
      echo "sbp-workers: worker (pid $done_pid) exited with status $status:" \
        "stopping the other $left" >&2
      stop
    fi
  fi
done
exit "${first:-0}"
