"""A real StreamBP cluster on loopback for the client's tests.

Starts sbp-coordinator (a users file with two users and a worker identity,
a SQLite database, a work directory with one area per user holding a tiny
model and data set) and one sbp-worker, from the binaries in $SBP_BIN
(default: build-nocuda/bin, else build/bin, of the repository). Every process
is killed when the cluster stops, and its log is kept in the scratch
directory for failure messages.
"""

import ctypes
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
USERS = ("alice", "bob")


def binary_dir():
    """$SBP_BIN, else the first of build-nocuda/bin and build/bin holding the binaries."""
    given = os.environ.get("SBP_BIN")
    candidates = [given] if given else [os.path.join(REPO, d, "bin")
                                        for d in ("build-nocuda", "build")]
    for d in candidates:
        if all(os.access(os.path.join(d, b), os.X_OK)
               for b in ("sbp", "sbp-coordinator", "sbp-worker")):
            return os.path.abspath(d)
    raise RuntimeError(
        f"no sbp, sbp-coordinator and sbp-worker in {' or '.join(candidates)}: build them "
        "(ninja -C build-nocuda sbp sbp-coordinator sbp-worker) or set SBP_BIN to their directory")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    # In the child before exec: its own process group, and SIGKILL when the
    # test process dies, however it dies (PR_SET_PDEATHSIG).
    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


class Cluster:
    """dir/: users.yaml, <user>.token, worker.token, <user>/{model,data.jsonl}, *.log."""

    def __init__(self, tls=False):
        self.bin = binary_dir()
        self.dir = tempfile.mkdtemp(prefix="sbp-python-client-")
        self.address = f"127.0.0.1:{free_port()}"
        self._procs = {}
        self._write_identities()
        self._write_areas()
        self.tls_ca = self._make_certificate() if tls else None

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def token_file(self, user):
        return self.path(f"{user}.token")

    def _write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)

    def _write_identities(self):
        lines = ["users:"]
        for user in USERS:
            self._write(f"{user}.token", f"{user}-secret\n")
            lines += [f"  - name: {user}", "    role: user",
                      f"    token_sha256: [{sha256(user + '-secret')}]"]
        self._write("worker.token", "worker-secret\n")
        lines += ["workers:", "  - name: pool", f"    token_sha256: [{sha256('worker-secret')}]"]
        self._write("users.yaml", "\n".join(lines) + "\n")

    def _write_areas(self):
        # The reversal task of the e2e tests: prompt a b c, completion c b a.
        data = ""
        for i in range(24):
            a, b, c = 16 + i % 8, 16 + (i * 3) % 8, 16 + (i * 5) % 8
            data += (f'{{"prompt_ids": [1, {a}, {b}, {c}, 2], '
                     f'"completion_ids": [{c}, {b}, {a}, 3]}}\n')
        model = self.path("model")
        subprocess.run([os.path.join(self.bin, "sbp"), "model", "init", "--preset", "tiny-qwen3",
                        "--seed", "1", "--out", model], check=True, capture_output=True,
                       timeout=60)
        for user in USERS:
            shutil.copytree(model, self.path(user, "model"))
            self._write(os.path.join(user, "data.jsonl"), data)

    def _make_certificate(self):
        # Self-signed for 127.0.0.1 (openssl, as tests/e2e/tls_test.cc); the
        # certificate is its own CA.
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        "-keyout", self.path("key.pem"), "-out", self.path("cert.pem")],
                       check=True, capture_output=True, timeout=60)
        return self.path("cert.pem")

    def _start(self, name, argv, env=None):
        log = open(self.path(f"{name}.log"), "ab")
        self._procs[name] = subprocess.Popen(
            argv, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})}, preexec_fn=_die_with_parent)
        log.close()

    def start(self, worker=True, wait_seconds=20):
        """Starts the coordinator (and worker w0); returns once w0 is idle (or whoami answers)."""
        tls = ["--tls-cert", self.tls_ca, "--tls-key", self.path("key.pem")] if self.tls_ca else []
        self._start("coordinator", [
            os.path.join(self.bin, "sbp-coordinator"), "--listen", self.address,
            "--db", self.path("coordinator.db"), "--users", self.path("users.yaml"),
            "--work-dir", self.dir, "--lease-seconds", "3"] + tls)
        if worker:
            # One compute thread: the worker shares a small machine with the test.
            self._start("worker", [
                os.path.join(self.bin, "sbp-worker"), "--coordinator", self.address,
                "--token-file", self.path("worker.token"), "--memory", "2GiB",
                "--work-dir", self.dir, "--name", "w0"]
                + (["--tls-ca", self.tls_ca] if self.tls_ca else []),
                env={"OMP_NUM_THREADS": "1"})
        self._wait_until_ready(worker, wait_seconds)

    def client(self, user=USERS[0]):
        from streambp import Client  # the package under test

        return Client(self.address, token_file=self.token_file(user), tls_ca=self.tls_ca)

    def _wait_until_ready(self, worker, wait_seconds):
        from streambp import StreamBPError

        deadline = time.monotonic() + wait_seconds
        with self.client() as client:
            while True:
                for name, proc in self._procs.items():
                    if proc.poll() is not None:
                        raise RuntimeError(f"{name} exited ({proc.returncode})\n{self.logs()}")
                try:
                    if not worker:
                        client.whoami()
                        return
                    if any(w.name == "w0" and w.state == "idle" for w in client.workers()):
                        return
                except StreamBPError:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not ready after {wait_seconds} s\n{self.logs()}")
                time.sleep(0.1)

    def logs(self):
        out = ""
        for name in self._procs:
            with open(self.path(f"{name}.log"), errors="replace") as f:
                out += f"--- {name}.log\n{f.read()[-4000:]}"
        return out

    def stop(self, keep=False):
        for proc in self._procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self._procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)
