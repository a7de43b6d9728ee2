"""Python client for the StreamBP training coordinator.

    from streambp import Client
    with Client("127.0.0.1:7700", token_file="client.token") as sbp:
        job = sbp.submit("examples/jobs/tiny-sft.yaml", watch=True)
        print(job.state, [m["loss"] for m in sbp.metrics(job.id)][-1])

Client methods return the dataclasses of streambp.types (enums as short
names such as "SUCCEEDED") and raise streambp.errors.StreamBPError subclasses
named after gRPC status codes (NotFound, InvalidArgument, ...). The generated
protobuf modules are streambp.v1.*_pb2.
"""

from .client import Client, spec_text
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded,
                     FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange,
                     PermissionDenied, ResourceExhausted, StreamBPError, Unauthenticated,
                     Unavailable, Unimplemented)
from .types import Job, JobEvent, JobProgress, OutputLine, RolloutProgress, WhoAmI, Worker

__version__ = "0.1.0"

__all__ = [
    "Client", "spec_text", "StreamBPError", "Aborted", "AlreadyExists", "Cancelled", "DataLoss",
    "DeadlineExceeded", "FailedPrecondition", "Internal", "InvalidArgument", "NotFound",
    "OutOfRange", "PermissionDenied", "ResourceExhausted", "Unauthenticated", "Unavailable",
    "Unimplemented", "Job", "JobEvent", "JobProgress", "OutputLine", "RolloutProgress", "WhoAmI",
    "Worker",
]
