#!/usr/bin/env python3
"""A run's TensorBoard event files, read back by TensorBoard itself.

`sbp train` runs a tiny SFT job; then its last checkpoints are removed and the
same command with --resume continues from an earlier one and trains those steps again (a new
event file). TensorBoard's own reader must then see, for every numeric field
of every metrics.jsonl line, exactly one scalar at that step with that value
(as float32): the resumed attempt's session start dropped what the first one
wrote past the checkpoint. metrics.jsonl lines carry `time` (RFC 3339, UTC)
and `epoch`.

Needs .venv-tracking (scripts/bootstrap --tracking-tools) and a built sbp
($SBP_CLI, default build/bin/sbp). .ci/run runs it:
    .venv-tracking/bin/python tests/tools/tensorboard_test.py
"""
import datetime
import glob
import json
import os
import shutil
import struct
import tempfile
import unittest

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from sbp_cli import run

SPEC = """name: tracked
objective: sft
model: model
data: data.jsonl
seq_len: 64
train: {steps: 12, sequences_per_step: 2, micro_batch_sequences: 2, lr: 1.0e-3, warmup_steps: 2}
checkpoint: {every_steps: 4, keep_last: 10}
"""


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


class TensorBoardTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sbp_tensorboard_")
        run(["model", "init", "--preset", "tiny-qwen3", "--seed", "1", "--out", "model"], self.dir)
        with open(os.path.join(self.dir, "data.jsonl"), "w") as f:
            for i in range(10):
                ids = [(7 * i + j) % 200 + 4 for j in range(20)]
                f.write(json.dumps({"input_ids": ids, "labels": ids}) + "\n")
        with open(os.path.join(self.dir, "job.yaml"), "w") as f:
            f.write(SPEC)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_every_metric_once_per_step_across_a_resume(self):
        run(["train", "job.yaml"], self.dir)
        run_dir = os.path.join(self.dir, "runs", "tracked")
        checkpoints = os.path.join(run_dir, "checkpoints")
        # Back to step 4: the next attempt trains steps 5..12 again.
        for step in (8, 12):
            shutil.rmtree(os.path.join(checkpoints, f"step-{step:08d}"))
        os.remove(os.path.join(checkpoints, "latest"))  # a link to the newest step
        os.symlink("step-00000004", os.path.join(checkpoints, "latest"))
        run(["train", "job.yaml", "--resume"], self.dir)

        files = glob.glob(os.path.join(run_dir, "tb", "events.out.tfevents.*"))
        self.assertEqual(len(files), 2, files)
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        self.assertEqual([line["step"] for line in lines], list(range(1, 13)))

        events = EventAccumulator(os.path.join(run_dir, "tb"), size_guidance={"scalars": 0})
        events.Reload()
        tags = set(events.Tags()["scalars"])
        expected = set()
        for line in lines:
            for key, value in line.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    expected.add(key)
        self.assertEqual(tags, expected)
        for tag in sorted(tags):
            scalars = events.Scalars(tag)
            self.assertEqual([s.step for s in scalars], [l["step"] for l in lines if tag in l], tag)
            for s, line in zip(scalars, [l for l in lines if tag in l]):
                self.assertEqual(s.value, f32(line[tag]), f"{tag} at step {s.step}")

        previous = None
        for line in lines:
            when = datetime.datetime.strptime(line["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
            self.assertLess(abs((datetime.datetime.utcnow() - when).total_seconds()), 600)
            if previous is not None:
                self.assertGreater(line["epoch"], previous)
            previous = line["epoch"]
        # 12 steps of 2 sequences over 10 examples.
        self.assertAlmostEqual(lines[-1]["epoch"], 2.4)


if __name__ == "__main__":
    unittest.main()
