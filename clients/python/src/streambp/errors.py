"""Errors of the StreamBP client, one class per gRPC status code.

Every failed call raises a StreamBPError subclass carrying the status code's
name (`code`, e.g. "INVALID_ARGUMENT") and the coordinator's own message
(`message`, e.g. "job.yaml: train.lr: must be a positive number"), as the
`sbp` CLI prints them.
"""

import grpc


class StreamBPError(Exception):
    """A failed call; `code` is the gRPC status code's name, `message` the server's text."""

    code = "UNKNOWN"

    def __init__(self, message, code=None):
        if code is not None:
            self.code = code
        self.message = message
        super().__init__(f"{self.code}: {message}")


class Cancelled(StreamBPError):
    code = "CANCELLED"


class InvalidArgument(StreamBPError, ValueError):
    """A bad spec, flag or request; the message names the field."""

    code = "INVALID_ARGUMENT"


class DeadlineExceeded(StreamBPError):
    code = "DEADLINE_EXCEEDED"


class NotFound(StreamBPError):
    """No such job, or a job of another user (the two are not told apart)."""

    code = "NOT_FOUND"


class AlreadyExists(StreamBPError):
    code = "ALREADY_EXISTS"


class PermissionDenied(StreamBPError):
    """A token of the wrong role, or an admin-only request."""

    code = "PERMISSION_DENIED"


class ResourceExhausted(StreamBPError):
    """No registered worker can hold the job, or a quota is reached."""

    code = "RESOURCE_EXHAUSTED"


class FailedPrecondition(StreamBPError):
    code = "FAILED_PRECONDITION"


class Aborted(StreamBPError):
    code = "ABORTED"


class OutOfRange(StreamBPError):
    code = "OUT_OF_RANGE"


class Unimplemented(StreamBPError):
    code = "UNIMPLEMENTED"


class Internal(StreamBPError):
    code = "INTERNAL"


class Unavailable(StreamBPError):
    """The coordinator cannot be reached."""

    code = "UNAVAILABLE"


class DataLoss(StreamBPError):
    code = "DATA_LOSS"


class Unauthenticated(StreamBPError):
    """No token, or one the coordinator does not know."""

    code = "UNAUTHENTICATED"


_BY_CODE = {cls.code: cls for cls in (
    Cancelled, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists, PermissionDenied,
    ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented, Internal,
    Unavailable, DataLoss, Unauthenticated)}


def from_rpc_error(error):
    """The StreamBPError for a grpc.RpcError (a failed call or stream)."""
    status = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    name = status.name if isinstance(status, grpc.StatusCode) else "UNKNOWN"
    message = error.details() if hasattr(error, "details") else str(error)
    if not message and name == "UNAVAILABLE":
        message = "coordinator unreachable"
    return _BY_CODE.get(name, StreamBPError)(message or "", code=name)
