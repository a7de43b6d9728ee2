"""Bearer tokens and channels, read the way the `sbp` CLI reads them.

A token is one run of visible ASCII (0x21-0x7e), surrounding white space (a
trailing newline) removed, at most 4096 bytes; anything else is refused with
a message naming its source, never showing the token. Every call carries it
as `authorization: Bearer <token>` metadata. With a CA file the channel is
TLS against those roots; without one it is plaintext.
"""

import os
import stat

import grpc

from .errors import InvalidArgument

MAX_TOKEN_BYTES = 4096
_WHITESPACE = " \t\n\r\f\v"

# As the CLI's channel: find a restarted coordinator within seconds, accept
# large pages of jobs.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_receive_message_length", 64 << 20),
]


def parse_token(text, source):
    """The token in `text`; `source` ("token file PATH", "$SBP_TOKEN") names it in errors."""
    token = text.strip(_WHITESPACE)
    if not token:
        raise InvalidArgument(f"{source} holds no token")
    data = token.encode("utf-8", errors="surrogateescape")
    if len(data) > MAX_TOKEN_BYTES:
        raise InvalidArgument(
            f"{source} holds {len(data)} bytes; a token is at most {MAX_TOKEN_BYTES}")
    for i, byte in enumerate(data):
        if 0x21 <= byte <= 0x7E:
            continue
        what = ("white space (two tokens or lines?)" if chr(byte) in _WHITESPACE
                else f"0x{byte:02x}")
        raise InvalidArgument(
            f"{source} is not one token: byte {i + 1} of it is {what}; a token is visible "
            "ASCII characters alone (the token is not shown)")
    return token


def read_token_file(path):
    """The token in the regular file at `path` (a FIFO is refused before it is opened)."""
    path = os.fspath(path)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"cannot read token file {path}: not a regular file")
        if info.st_size > MAX_TOKEN_BYTES + 1024:
            raise InvalidArgument(
                f"cannot read token file {path}: {info.st_size} bytes is too large for a token")
        with open(path, "rb") as f:
            data = f.read(MAX_TOKEN_BYTES + 1025)
    except OSError as e:
        raise InvalidArgument(f"cannot read token file {path}: {e.strerror}") from None
    return parse_token(data.decode("utf-8", errors="surrogateescape"), f"token file {path}")


def resolve_token(token=None, token_file=None):
    """An explicit token, else the token file's, else $SBP_TOKEN's; None for no token."""
    if token is not None and token_file is not None:
        raise InvalidArgument("give token or token_file, not both")
    if token is not None:
        return parse_token(token, "the token given")
    if token_file is not None:
        return read_token_file(token_file)
    env = os.environ.get("SBP_TOKEN", "")
    return parse_token(env, "$SBP_TOKEN") if env.strip(_WHITESPACE) else None


def open_channel(address, tls_ca=None):
    """A channel to the coordinator: TLS against the PEM roots in `tls_ca`, else plaintext."""
    if not address:
        raise InvalidArgument("no coordinator address given")
    if tls_ca is None:
        return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    try:
        with open(tls_ca, "rb") as f:
            roots = f.read()
    except OSError as e:
        raise InvalidArgument(f"tls_ca: cannot read {os.fspath(tls_ca)}: {e.strerror}") from None
    credentials = grpc.ssl_channel_credentials(root_certificates=roots)
    return grpc.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
