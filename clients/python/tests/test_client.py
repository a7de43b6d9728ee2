"""The streambp client against a real sbp-coordinator and sbp-worker.

Two users (alice, bob) on one coordinator with one worker: a tiny SFT job
submitted, watched to SUCCEEDED, its metrics, events and logs read; bob
cannot see alice's job; bad specs and bad tokens raise the typed errors; a
running job is cancelled; and a TLS coordinator is reached with tls_ca.

    SBP_BIN=build-nocuda/bin python -m unittest discover -s clients/python/tests
"""

import json
import math
import os
import pathlib
import shutil
import time
import unittest
import uuid

import streambp
from cluster_util import Cluster


def tiny_spec(name, steps=6):
    """An SFT job over the tiny model and data in the owner's area."""
    return {
        "name": name, "model": "model", "data": "data.jsonl", "objective": "sft", "seq_len": 16,
        "streambp": {"mode": "stream", "chunk_tokens": 4, "logits_chunk_tokens": 4},
        "train": {"steps": steps, "sequences_per_step": 2, "lr": 1.0e-2},
        "checkpoint": {"every_steps": 0},
    }


def wait_for(condition, seconds=20, pause=0.1):
    """condition()'s first true value, polled every `pause` s for up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(pause)


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        try:
            cls.cluster.start()
        except BaseException:
            cls.cluster.stop(keep=True)
            raise
        cls.alice = cls.cluster.client("alice")
        cls.bob = cls.cluster.client("bob")

    @classmethod
    def tearDownClass(cls):
        cls.alice.close()
        cls.bob.close()
        cls.cluster.stop()

    def logs(self):
        return "\n" + self.cluster.logs()

    def test_whoami(self):
        me = self.alice.whoami()
        self.assertEqual((me.name, me.role), ("alice", "user"))
        self.assertEqual(self.bob.whoami().name, "bob")

    def test_a_job_runs_to_success_with_metrics_events_and_logs(self):
        job = self.alice.submit(tiny_spec("watched"))
        self.assertTrue(job.id)
        self.assertEqual(job.owner, "alice")
        self.assertIn(job.state, ("PENDING", "SCHEDULED", "RUNNING"))
        updates = list(self.alice.watch(job.id))
        self.assertEqual(updates[-1].state, "SUCCEEDED", updates[-1].reason + self.logs())
        self.assertTrue(updates[-1].done)
        self.assertEqual(updates[-1].progress.step, 6)
        self.assertTrue(updates[-1].finished_at)
        revisions = [u.revision for u in updates]
        self.assertEqual(revisions, sorted(set(revisions)))

        # Workers ship their lines in batches: they may land just after the job ends.
        metrics = wait_for(lambda: [m for m in self.alice.metrics(job.id) if "loss" in m])
        self.assertTrue(metrics, self.logs())
        self.assertEqual(metrics[0]["step"], 1)
        self.assertTrue(all(math.isfinite(m["loss"]) and m["loss"] > 0 for m in metrics))
        self.assertEqual(list(self.alice.metrics(job.id, from_step=6))[-1]["step"], 6)

        events = self.alice.events(job.id)
        states = [e.to_state for e in events if e.to_state]
        self.assertEqual(states[0], "PENDING")
        self.assertEqual(states[-1], "SUCCEEDED")
        self.assertIn("RUNNING", states)
        self.assertTrue(all(e.time is not None for e in events))
        later = self.alice.events(job.id, after_sequence=events[0].sequence)
        self.assertEqual(len(later), len(events) - 1)

        logs = wait_for(lambda: [line.text for line in self.alice.logs(job.id)
                                 if "step 6/6" in line.text])
        self.assertTrue(logs, self.logs())

        self.assertIn(job.id, [j.id for j in self.alice.list()])
        self.assertIn(job.id, [j.id for j in self.alice.list(states=["succeeded"])])
        self.assertNotIn(job.id, [j.id for j in self.alice.list(states=["RUNNING"])])
        self.assertEqual(self.alice.get(job.id).state, "SUCCEEDED")

    def test_spec_from_a_file_or_text_and_submit_watch(self):
        area = self.cluster.path("alice")
        spec_file = pathlib.Path(area, "from-file.yaml")
        spec_file.write_text(json.dumps(tiny_spec("from-file", steps=2)))
        done = self.alice.submit(spec_file, watch=True)
        self.assertEqual(done.state, "SUCCEEDED", done.reason + self.logs())
        self.assertEqual(done.progress.step, 2)
        self.assertEqual(json.loads(done.spec_yaml)["name"], "from-file")  # sent unchanged

        text = ("name: from-text\nmodel: model\ndata: data.jsonl\nobjective: sft\nseq_len: 16\n"
                "train: {steps: 1, sequences_per_step: 2, lr: 1.0e-2}\n")
        request_id = str(uuid.uuid4())
        first = self.alice.submit(text, request_id=request_id)
        again = self.alice.submit(text, request_id=request_id)  # idempotent
        self.assertEqual(first.id, again.id)
        self.assertEqual(first.spec_yaml, text)
        self.assertEqual(self.alice.wait(first.id, timeout=60).state, "SUCCEEDED", self.logs())

    def test_another_users_job_is_not_found(self):
        job = self.alice.submit(tiny_spec("private", steps=1))
        self.alice.wait(job.id, timeout=60)
        for call in (self.bob.get, self.bob.cancel, self.bob.events,
                     lambda i: list(self.bob.metrics(i)), lambda i: list(self.bob.logs(i)),
                     lambda i: list(self.bob.watch(i))):
            with self.assertRaises(streambp.NotFound) as caught:
                call(job.id)
            self.assertEqual(caught.exception.code, "NOT_FOUND")
            self.assertIn("no job with id", caught.exception.message)
        self.assertNotIn(job.id, [j.id for j in self.bob.list()])
        with self.assertRaises(streambp.PermissionDenied):
            self.bob.list(user="alice")  # an admin's filter

    def test_bad_specs_are_invalid_arguments_naming_the_field(self):
        bad_lr = tiny_spec("bad-lr")
        bad_lr["train"]["lr"] = -1
        with self.assertRaises(streambp.InvalidArgument) as caught:
            self.alice.submit(bad_lr)
        self.assertIn("train.lr", caught.exception.message)
        self.assertIn("positive", caught.exception.message)
        self.assertIsInstance(caught.exception, ValueError)

        outside = tiny_spec("outside")
        outside["model"] = "../bob/model"  # another user's area
        with self.assertRaises(streambp.InvalidArgument) as caught:
            self.alice.submit(outside)
        self.assertIn("model", caught.exception.message)

        with self.assertRaises(FileNotFoundError):
            self.alice.submit(self.cluster.path("alice", "no-such-job.yaml"))
        with self.assertRaises(TypeError):
            self.alice.submit(42)

    def test_tokens(self):
        with streambp.Client(self.cluster.address, token="not-a-user") as stranger:
            with self.assertRaises(streambp.Unauthenticated):
                stranger.list()
        worker_token = self.cluster.path("worker.token")
        with streambp.Client(self.cluster.address, token_file=worker_token) as worker:
            with self.assertRaises(streambp.PermissionDenied):
                worker.get("anything")
        saved = os.environ.pop("SBP_TOKEN", None)
        try:
            with streambp.Client(self.cluster.address) as anonymous:  # no token at all
                with self.assertRaises(streambp.Unauthenticated):
                    anonymous.whoami()
            os.environ["SBP_TOKEN"] = "bob-secret\n"  # the default, as for the CLI
            with streambp.Client(self.cluster.address) as from_env:
                self.assertEqual(from_env.whoami().name, "bob")
        finally:
            os.environ.pop("SBP_TOKEN", None)
            if saved is not None:
                os.environ["SBP_TOKEN"] = saved
        two_lines = self.cluster.path("two-lines.token")
        pathlib.Path(two_lines).write_text("alice-secret\nbob-secret\n")
        with self.assertRaises(streambp.InvalidArgument) as caught:
            streambp.Client(self.cluster.address, token_file=two_lines)
        self.assertIn("two tokens or lines", caught.exception.message)
        self.assertNotIn("secret", caught.exception.message)
        with self.assertRaises(streambp.InvalidArgument):
            streambp.Client(self.cluster.address, token_file=self.cluster.path("missing.token"))

    def test_cancel_a_running_job(self):
        job = self.alice.submit(tiny_spec("long", steps=1000000))
        running = wait_for(lambda: self.alice.get(job.id).progress.step >= 1, seconds=30)
        self.assertTrue(running, self.logs())
        with self.assertRaises(TimeoutError):
            self.alice.wait(job.id, timeout=0.5)
        cancelled = self.alice.cancel(job.id, reason="enough")
        self.assertIn(cancelled.state, ("CANCELLED", "RUNNING"))
        final = self.alice.wait(job.id, timeout=30)
        self.assertEqual(final.state, "CANCELLED", self.logs())
        self.assertIn("enough", final.reason)
        with self.assertRaises(streambp.StreamBPError):
            self.alice.get("no-such-job")

    def test_unreachable_coordinator_is_unavailable(self):
        from cluster_util import free_port

        with streambp.Client(f"127.0.0.1:{free_port()}", token="x", timeout=5) as nobody:
            with self.assertRaises(streambp.Unavailable):
                nobody.list()
            # Streams too fail at once: only a stream that was open is retried.
            started = time.monotonic()
            with self.assertRaises(streambp.Unavailable):
                list(nobody.metrics("some-job"))
            with self.assertRaises(streambp.Unavailable):
                list(nobody.watch("some-job"))
            self.assertLess(time.monotonic() - started, 30)


@unittest.skipUnless(shutil.which("openssl"), "openssl is not installed")
class TlsTest(unittest.TestCase):
    def test_tls_with_the_ca_and_not_without(self):
        cluster = Cluster(tls=True)
        try:
            cluster.start(worker=False)
            with cluster.client("alice") as alice:
                self.assertEqual(alice.whoami().name, "alice")
            with streambp.Client(cluster.address, token_file=cluster.token_file("alice"),
                                 timeout=5) as plaintext:
                with self.assertRaises(streambp.Unavailable):
                    plaintext.whoami()
            with self.assertRaises(streambp.InvalidArgument):
                streambp.Client(cluster.address, tls_ca=cluster.path("nope.pem"))
        finally:
            cluster.stop()


if __name__ == "__main__":
    unittest.main()
