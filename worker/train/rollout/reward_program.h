// A reward computed by a user program (grpo.reward.command), one child
// process per Score call, speaking JSON lines:
//
//   stdin   one line per completion, in order, then end of file:
//             {"index": 0, "prompt_ids": [..], "completion_ids": [..],
//              "prompt": "<prompt text>", "completion": "<completion text>",
//              "truncated": false, "fields": {<the prompt line's fields>}}
//           (keys in this order; text that is not valid UTF-8 has U+FFFD in
//           place of the bad bytes; a program may stop reading early);
//   stdout  one reward per completion, in input order, one per line: a JSON
//           number (`0.5`) or an object with a number "reward"
//           (`{"reward": 0.5, ...}`, other keys ignored); blank lines are
//           skipped; at most 64 MiB;
//   stderr  passed line by line to RewardContext::on_stderr_line (lines over
//           4 KiB are cut, marked " [truncated]");
//   exit    status 0.
//
// The program (command[0]; looked up on PATH when it has no '/') runs in
// RewardContext::working_dir, in a process group of its own, with the
// trainer's environment, default signal dispositions and no file
// descriptors but 0, 1 and 2. Stdin, stdout and stderr are served together
// (poll), so a program may write before it has read everything. The whole
// call has a wall-clock limit of `timeout_s`; on expiry the process group is
// killed (SIGKILL) and reaped. When the program exits, whatever is left of
// its process group is killed too.
//
// Every failure is InvalidArgument naming the program and what went wrong:
// it cannot be started, exits non-zero or by a signal (with its last stderr
// lines), does not finish in time, writes too few or too many rewards, or a
// line that is not a finite number.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/train/rollout/reward.h"

namespace sbp {

// The reward of `command` (non-empty, command[0] non-empty); `timeout_s` > 0
// and finite. Score is safe to call from one thread at a time.
absl::StatusOr<std::unique_ptr<RewardFunction>> MakeRewardProgram(std::vector<std::string> command,
                                                                  double timeout_s,
                                                                  RewardContext context);

}  // namespace sbp
