"""Plain dataclasses for what the coordinator returns.

Each mirrors one message of proto/streambp/v1 field for field, with Python
values: enums as short upper-case names ("SUCCEEDED", "BAD_INPUT", "CPU"; ""
for the proto's UNSPECIFIED, e.g. a JobEvent that changes no state),
timestamps as timezone-aware UTC datetimes (None when unset), nested messages
as their dataclasses (None when unset), repeated fields as lists. `raw` holds
the protobuf message itself, for a field added to the protos after this
module was written.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass, field
from typing import Any, Optional



def _raw():
    """The `raw` field: the protobuf message, left out of repr and ==."""
    return field(default=None, repr=False, compare=False)


@dataclass
class RolloutProgress:
    reward_mean: float
    reward_std: float
    completion_length_mean: float
    completion_length_max: int
    truncated_fraction: float
    rollout_tokens_per_second: float
    rollout_seconds: float
    train_seconds: float
    raw: Any = _raw()


@dataclass
class JobProgress:
    step: int
    total_steps: int
    loss: float
    learning_rate: float
    grad_norm: float
    tokens_per_second: float
    tokens_total: int
    mfu: float
    peak_bytes: int
    current_bytes: int
    step_seconds: float
    eta_seconds: float  # < 0: unknown
    updated_at: Optional[datetime.datetime]
    eval_loss: float
    eval_step: int  # 0: no validation loss yet
    checkpoint_tier: str
    optimizer_offload: bool
    host_tier_bytes: int
    host_tier_peak_bytes: int
    disk_tier_bytes: int
    offload_copy_bytes_per_second: float
    offload_wait_seconds: float
    rollout: Optional[RolloutProgress]  # online GRPO jobs only
    raw: Any = _raw()


TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


@dataclass
class Job:
    id: str
    name: str
    spec_yaml: str
    state: str  # PENDING, SCHEDULED, RUNNING, SUCCEEDED, FAILED, CANCELLED, RETRYING
    reason: str
    attempt: int
    max_restarts: int
    priority: int
    world_size: int
    worker_ids: list
    progress: Optional[JobProgress]
    failure_class: str  # "" or OUT_OF_MEMORY, BAD_INPUT, LOST_WORKER, STALLED, ...
    last_checkpoint: str
    required_memory_bytes: int
    request_id: str
    revision: int
    created_at: Optional[datetime.datetime]
    updated_at: Optional[datetime.datetime]
    started_at: Optional[datetime.datetime]
    finished_at: Optional[datetime.datetime]
    owner: str
    preemptions: int
    required_host_memory_bytes: int
    required_offload_disk_bytes: int
    run_dir: str
    stopping: bool
    raw: Any = _raw()

    @property
    def done(self) -> bool:
        """True once the job has ended (SUCCEEDED, FAILED or CANCELLED)."""
        return self.state in TERMINAL_STATES


@dataclass
class JobEvent:
    sequence: int
    time: Optional[datetime.datetime]
    from_state: str
    to_state: str  # "" for a notice (a log line, a checkpoint) that changes no state
    attempt: int
    reason: str
    message: str
    raw: Any = _raw()


@dataclass
class MemoryUsage:
    current_bytes: int
    peak_bytes: int
    capacity_bytes: int
    raw: Any = _raw()


@dataclass
class Worker:
    id: str
    name: str
    device: str  # CPU, CUDA
    memory_bytes: int
    state: str  # idle, busy, lost
    job_id: str
    memory: Optional[MemoryUsage]
    last_heartbeat: Optional[datetime.datetime]
    version: str
    host_memory_bytes: int
    offload_disk_bytes: int
    raw: Any = _raw()


@dataclass
class WhoAmI:
    name: str
    role: str  # user, admin ("anonymous" when the coordinator is open)
    max_running_workers: int  # 0: no limit
    max_pending_jobs: int  # 0: no limit
    has_max_priority: bool
    max_priority: int
    raw: Any = _raw()


@dataclass
class OutputLine:
    """One metrics or log line of a job (JobService.Metrics / Logs)."""

    cursor: int  # resume a stream after it with after_cursor
    attempt: int
    rank: int
    time: Optional[datetime.datetime]  # when the coordinator received it
    text: str
    raw: Any = _raw()


# Proto message full name -> dataclass (the ones converted as fields of others).
_BY_MESSAGE = {
    "streambp.v1.RolloutProgress": RolloutProgress,
    "streambp.v1.JobProgress": JobProgress,
    "streambp.v1.Job": Job,
    "streambp.v1.JobEvent": JobEvent,
    "streambp.v1.MemoryUsage": MemoryUsage,
    "streambp.v1.Worker": Worker,
    "streambp.v1.WhoAmIResponse": WhoAmI,
    "streambp.v1.JobOutputLine": OutputLine,
}


def enum_prefix(enum_descriptor) -> str:
    """"JOB_STATE_" for JobState: the name of its zero value less "UNSPECIFIED"."""
    zero = enum_descriptor.values_by_number[0].name
    return zero[: -len("UNSPECIFIED")] if zero.endswith("UNSPECIFIED") else ""


def enum_short_name(enum_descriptor, number: int) -> str:
    """JOB_STATE_SUCCEEDED -> "SUCCEEDED"; the UNSPECIFIED value -> ""; unknown -> "<number>"."""
    value = enum_descriptor.values_by_number.get(number)
    if value is None:
        return str(number)
    if number == 0 and value.name.endswith("UNSPECIFIED"):
        return ""
    return value.name[len(enum_prefix(enum_descriptor)):]


def enum_number(enum_descriptor, name: str) -> int:
    """"running", "RUNNING" or "JOB_STATE_RUNNING" -> its number; ValueError otherwise."""
    wanted = name.strip().upper()
    prefix = enum_prefix(enum_descriptor)
    for value in enum_descriptor.values:
        if value.number != 0 and wanted in (value.name, value.name[len(prefix):]):
            return value.number
    known = ", ".join(v.name[len(prefix):] for v in enum_descriptor.values if v.number != 0)
    raise ValueError(f"unknown {enum_descriptor.name} '{name}' (known: {known})")


def _timestamp(message) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(message.seconds, tz=datetime.timezone.utc).replace(
        microsecond=message.nanos // 1000)


def from_proto(cls, message):
    """The dataclass `cls` filled from protobuf `message`, by field name."""
    descriptor = message.DESCRIPTOR
    values = {}
    for f in dataclasses.fields(cls):
        if f.name == "raw":
            continue
        fd = descriptor.fields_by_name[f.name]
        value = getattr(message, f.name)
        if fd.enum_type is not None:
            value = [enum_short_name(fd.enum_type, v) for v in value] if _repeated(fd) else \
                enum_short_name(fd.enum_type, value)
        elif fd.message_type is not None:
            value = _message_value(fd, message, value)
        elif _repeated(fd):
            value = list(value)
        values[f.name] = value
    return cls(raw=message, **values)


def _repeated(fd) -> bool:
    # FieldDescriptor.is_repeated is the newer spelling; label is the older one.
    repeated = getattr(fd, "is_repeated", None)
    return repeated if isinstance(repeated, bool) else fd.label == fd.LABEL_REPEATED


def _message_value(fd, message, value):
    def one(v):
        if fd.message_type.full_name == "google.protobuf.Timestamp":
            return _timestamp(v)
        cls = _BY_MESSAGE.get(fd.message_type.full_name)
        return from_proto(cls, v) if cls is not None else v

    if _repeated(fd):
        return [one(v) for v in value]
    return one(value) if message.HasField(fd.name) else None
