"""The package without a cluster: its generated modules are those of the repository's
protos as they are now, its dataclasses name only fields the protos have, and specs
are sent as the docs say."""

import dataclasses
import filecmp
import json
import os
import pathlib
import sys
import tempfile
import unittest

import streambp
from streambp import spec_text, types
from streambp.v1 import jobs_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import generate  # noqa: E402  (clients/python/generate.py)


class GeneratedModulesTest(unittest.TestCase):
    def test_installed_modules_match_the_protos(self):
        installed = os.path.dirname(jobs_pb2.__file__)
        with tempfile.TemporaryDirectory() as out:
            written = generate.generate(out)
            stale = [os.path.basename(path) for path in written
                     if not filecmp.cmp(path, os.path.join(installed, os.path.basename(path)),
                                        shallow=False)
                     if os.path.exists(os.path.join(installed, os.path.basename(path)))]
            missing = [os.path.basename(path) for path in written
                       if not os.path.exists(os.path.join(installed, os.path.basename(path)))]
        self.assertEqual(
            (stale, missing), ([], []),
            f"the streambp package in {installed} was built from other protos than "
            f"{generate.DEFAULT_PROTO_DIR}: reinstall it (scripts/bootstrap --python-client)")


class TypesTest(unittest.TestCase):
    def test_dataclass_fields_are_proto_fields(self):
        for full_name, cls in types._BY_MESSAGE.items():
            message = jobs_pb2.DESCRIPTOR.pool.FindMessageTypeByName(full_name)
            names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
            self.assertEqual(names - set(message.fields_by_name), set(), full_name)

    def test_conversion(self):
        raw = jobs_pb2.Job(id="j", state=jobs_pb2.JOB_STATE_FAILED,
                           failure_class=jobs_pb2.FAILURE_CLASS_BAD_INPUT, worker_ids=["a", "b"])
        raw.created_at.seconds, raw.created_at.nanos = 1700000000, 5000
        job = types.from_proto(types.Job, raw)
        self.assertEqual((job.state, job.failure_class, job.worker_ids),
                         ("FAILED", "BAD_INPUT", ["a", "b"]))
        self.assertTrue(job.done)
        self.assertEqual(job.created_at.timestamp(), 1700000000.000005)
        self.assertIsNone(job.finished_at)
        self.assertIsNone(job.progress)
        self.assertIs(job.raw, raw)
        event = types.from_proto(types.JobEvent, jobs_pb2.JobEvent(message="checkpoint"))
        self.assertEqual(event.to_state, "")
        states = jobs_pb2.JobState.DESCRIPTOR
        self.assertEqual(types.enum_number(states, "running"), jobs_pb2.JOB_STATE_RUNNING)
        self.assertEqual(types.enum_number(states, "JOB_STATE_RUNNING"), jobs_pb2.JOB_STATE_RUNNING)
        with self.assertRaisesRegex(ValueError, "unknown JobState 'asleep'.*PENDING"):
            types.enum_number(states, "asleep")


class SpecTextTest(unittest.TestCase):
    def test_forms(self):
        spec = {"name": "x", "train": {"lr": 1e-5, "steps": 3}, "data": pathlib.Path("d.jsonl")}
        self.assertEqual(json.loads(spec_text(spec)),
                         {"name": "x", "train": {"lr": 1e-5, "steps": 3}, "data": "d.jsonl"})
        self.assertEqual(spec_text("name: x\nseq_len: 16\n"), "name: x\nseq_len: 16\n")
        self.assertEqual(spec_text("{name: x}"), "{name: x}")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "job.yaml")
            pathlib.Path(path).write_text("name: from-file\n")
            self.assertEqual(spec_text(path), "name: from-file\n")
            self.assertEqual(spec_text(pathlib.Path(path)), "name: from-file\n")
        with self.assertRaises(TypeError):
            spec_text({"name": object()})

    def test_errors_carry_code_and_message(self):
        e = streambp.InvalidArgument("spec: train.lr: must be a positive number")
        self.assertEqual(str(e), "INVALID_ARGUMENT: spec: train.lr: must be a positive number")
        self.assertIsInstance(e, streambp.StreamBPError)


if __name__ == "__main__":
    unittest.main()
