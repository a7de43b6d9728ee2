"""Client: the coordinator's JobService, as the `sbp` job commands use it."""

import json
import os
import time
import uuid
from collections.abc import Mapping

import grpc

from . import auth, types
from .errors import StreamBPError, from_rpc_error

try:
    from .v1 import job_output_pb2, jobs_pb2, jobs_pb2_grpc
except ImportError as e:  # a source tree where generate.py has not run
    raise ImportError(
        "streambp: the generated protobuf modules are missing; install the package "
        "(pip install clients/python) or run clients/python/generate.py") from e

DEFAULT_ADDRESS = "127.0.0.1:7700"
CALL_TIMEOUT = 30.0  # seconds, each unary call (as the CLI)
GIVE_UP_AFTER = 120.0  # seconds a stream may keep failing before the error is raised
# Stream failures worth opening the stream again for (a coordinator restart).
_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})


class Client:
    """A connection to sbp-coordinator's JobService.

    address: "host:port" (default $SBP_COORDINATOR, else 127.0.0.1:7700).
    token / token_file: the client bearer token (default $SBP_TOKEN; none
    for an open coordinator). tls_ca: a PEM file of roots: connect with TLS.
    Methods return the dataclasses of streambp.types and raise the
    StreamBPError subclasses of streambp.errors.
    """

    def __init__(self, address=None, token_file=None, token=None, tls_ca=None,
                 timeout=CALL_TIMEOUT):
        self.address = address or os.environ.get("SBP_COORDINATOR") or DEFAULT_ADDRESS
        self._token = auth.resolve_token(token, token_file)
        self._timeout = timeout
        self._channel = auth.open_channel(self.address, tls_ca)
        self._stub = jobs_pb2_grpc.JobServiceStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Jobs.

    def submit(self, spec, watch=False, request_id=None):
        """Submits a job; returns it (with watch=True: as it ended).

        spec: a dict (sent as JSON, which is YAML), a path (os.PathLike, or a
        str without a newline) to a YAML file, whose text is sent unchanged, or
        YAML text (a str with a newline, or starting with "{"). Paths inside
        the spec resolve on the coordinator's side, in the owner's area of its
        work directory, as for `sbp submit`. request_id: the idempotency key
        (default: a new random one); the same id returns the same job.
        """
        request = jobs_pb2.SubmitJobRequest(spec_yaml=spec_text(spec),
                                            request_id=request_id or str(uuid.uuid4()))
        job = types.from_proto(types.Job, self._unary(self._stub.Submit, request).job)
        return self.wait(job.id) if watch else job

    def get(self, job_id):
        return types.from_proto(types.Job, self._unary(self._stub.Get,
                                                       jobs_pb2.GetJobRequest(id=job_id)))

    def list(self, states=None, limit=0, with_spec=False, user=""):
        """Jobs the caller may see (an admin: every job, or `user`'s); states: e.g. ["RUNNING"]; limit 0: all."""
        numbers = [types.enum_number(jobs_pb2.JobState.DESCRIPTOR, s) for s in states or []]
        jobs, token = [], ""
        while True:
            left = limit - len(jobs) if limit > 0 else 100
            request = jobs_pb2.ListJobsRequest(states=numbers, page_size=min(left, 100),
                                               page_token=token, with_spec=with_spec, user=user)
            page = self._unary(self._stub.List, request)
            jobs.extend(types.from_proto(types.Job, j) for j in page.jobs)
            token = page.next_page_token
            if not token or (limit > 0 and len(jobs) >= limit):
                return jobs

    def cancel(self, job_id, reason=""):
        request = jobs_pb2.CancelJobRequest(id=job_id, reason=reason)
        return types.from_proto(types.Job, self._unary(self._stub.Cancel, request))

    def events(self, job_id, after_sequence=0):
        """The job's events (state changes with reasons, notices), oldest first."""
        request = jobs_pb2.JobEventsRequest(id=job_id, after_sequence=after_sequence)
        return [types.from_proto(types.JobEvent, e)
                for e in self._unary(self._stub.Events, request).events]

    def watch(self, job_id, timeout=None):
        """Yields the job now, then at every change, until it has ended.

        timeout: seconds in all, after which TimeoutError is raised (None: none).

        A broken stream (the coordinator restarted) is opened again for up to
        two minutes; updates already yielded (by revision) are not repeated.
        Every update carries spec_yaml (the stream sends it in its first
        message only; a job's spec never changes).
        """
        revision, spec_yaml, failing_since, pause = -1, "", None, 0.25
        opened = False  # a coordinator that never answered is an error at once
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"job {job_id} had not ended after {timeout} s")
            call = self._stub.Watch(jobs_pb2.WatchJobRequest(id=job_id), timeout=left,
                                    metadata=self._metadata())
            try:
                for update in call:
                    failing_since, pause, opened = None, 0.25, True
                    if update.job.revision <= revision:
                        continue
                    revision = update.job.revision
                    job = types.from_proto(types.Job, update.job)
                    spec_yaml = job.spec_yaml = job.spec_yaml or spec_yaml
                    yield job
                    if job.done:
                        return
                error = None  # ended before the job did
            except grpc.RpcError as e:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"job {job_id} had not ended after {timeout} s") from None
                if not opened or e.code() not in _RETRYABLE | {grpc.StatusCode.CANCELLED}:
                    raise from_rpc_error(e) from None
                error = e
            finally:
                call.cancel()
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > GIVE_UP_AFTER:
                if error is not None:
                    raise from_rpc_error(error) from None
                raise StreamBPError("the watch stream kept ending", code="UNAVAILABLE")
            time.sleep(pause)
            pause = min(pause * 2, 3.0)

    def wait(self, job_id, timeout=None):
        """Follows the job to its end and returns it; TimeoutError after `timeout` seconds."""
        updates = self.watch(job_id, timeout)
        try:
            for job in updates:
                if job.done:
                    return job
        finally:
            updates.close()
        raise StreamBPError(f"the watch of job {job_id} ended before the job did")

    # Output.

    def metrics(self, job_id, follow=False, attempt=0, from_step=0):
        """Yields the job's metrics lines (its metrics.jsonl) as dicts, oldest first.

        attempt: only that attempt's lines (0: every attempt, as they arrived);
        from_step: steps >= this; follow: keep yielding until the job ends.
        """
        for line in self.metric_lines(job_id, follow, attempt, from_step):
            yield json.loads(line.text)

    def metric_lines(self, job_id, follow=False, attempt=0, from_step=0, after_cursor=0):
        """As metrics(), as OutputLine (cursor, attempt, rank, time, text)."""
        return self._output(self._stub.Metrics, job_id, follow, attempt, from_step, after_cursor)

    def logs(self, job_id, follow=False, attempt=0, after_cursor=0):
        """Yields the job's workers' log lines as OutputLine, oldest first."""
        return self._output(self._stub.Logs, job_id, follow, attempt, 0, after_cursor)

    # The caller and the cluster.

    def whoami(self):
        return types.from_proto(types.WhoAmI,
                                self._unary(self._stub.WhoAmI, jobs_pb2.WhoAmIRequest()))

    def workers(self):
        response = self._unary(self._stub.ListWorkers, jobs_pb2.ListWorkersRequest())
        return [types.from_proto(types.Worker, w) for w in response.workers]

    # Plumbing.

    def _metadata(self):
        return (("authorization", f"Bearer {self._token}"),) if self._token else ()

    def _unary(self, method, request):
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata())
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def _output(self, method, job_id, follow, attempt, from_step, after_cursor):
        # Read on after the last line received when the stream breaks, for up
        # to two minutes without progress.
        request = job_output_pb2.JobOutputRequest(id=job_id, attempt=attempt, from_step=from_step,
                                                  follow=follow, after_cursor=after_cursor)
        progress, pause, opened = time.monotonic(), 0.25, False
        while True:
            call = method(request, metadata=self._metadata())
            try:
                for chunk in call:
                    progress, pause, opened = time.monotonic(), 0.25, True
                    for line in chunk.lines:
                        request.after_cursor = line.cursor
                        yield types.from_proto(types.OutputLine, line)
                return
            except grpc.RpcError as e:
                if (not opened or e.code() not in _RETRYABLE
                        or time.monotonic() - progress > GIVE_UP_AFTER):
                    raise from_rpc_error(e) from None
            finally:
                call.cancel()
            time.sleep(pause)
            pause = min(pause * 2, 3.0)


def spec_text(spec):
    """The spec_yaml a submit sends for `spec` (see Client.submit)."""
    if isinstance(spec, Mapping):
        return json.dumps(spec, indent=2, default=_json_default) + "\n"
    if isinstance(spec, bytes):
        spec = spec.decode("utf-8")
    if isinstance(spec, str) and ("\n" in spec or spec.lstrip().startswith("{")):
        return spec
    if isinstance(spec, (str, os.PathLike)):
        with open(spec, encoding="utf-8") as f:
            return f.read()
    raise TypeError(f"a job spec is a dict, a path or YAML text, not {type(spec).__name__}")


def _json_default(value):
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"a job spec holds {type(value).__name__} {value!r}, which is not JSON")
