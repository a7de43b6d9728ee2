#!/usr/bin/env python3
"""Generates the client's protobuf and gRPC modules from the repository's protos.

    python generate.py [--proto-dir DIR] [--out DIR]

Compiles every proto/streambp/v1/*.proto with grpcio-tools' bundled protoc
and writes streambp/v1/<name>_pb2.py, <name>_pb2.pyi and <name>_pb2_grpc.py
under --out (default: src/ beside this file, for working in the source tree).
setup.py calls generate() when the package is built, so an installed package
always matches the protos it was built from and no generated file is kept in
the repository. Needs only grpcio-tools; works offline.
"""

import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The protos live at the repository root: clients/python/../../proto.
DEFAULT_PROTO_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTO_PACKAGE = os.path.join("streambp", "v1")


def proto_files(proto_dir):
    """The .proto files of streambp.v1 under proto_dir, sorted; an error if none."""
    files = sorted(glob.glob(os.path.join(proto_dir, PROTO_PACKAGE, "*.proto")))
    if not files:
        raise FileNotFoundError(
            f"no {PROTO_PACKAGE}/*.proto under {proto_dir}: build the client from the "
            "StreamBP repository (clients/python), or pass --proto-dir")
    return files


def generate(out_dir, proto_dir=DEFAULT_PROTO_DIR):
    """Writes the generated modules under out_dir/streambp/v1/; returns their paths."""
    try:
        from grpc_tools import protoc
    except ImportError as e:
        raise RuntimeError(
            "generating the StreamBP client needs grpcio-tools (pip install grpcio-tools)") from e
    # google/protobuf/*.proto (timestamp.proto) ship inside grpc_tools.
    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    proto_dir, out_dir = os.path.abspath(proto_dir), os.path.abspath(out_dir)
    files = proto_files(proto_dir)
    target = os.path.join(out_dir, PROTO_PACKAGE)
    os.makedirs(target, exist_ok=True)
    for old in glob.glob(os.path.join(target, "*_pb2*.py*")):  # of a proto since removed
        os.remove(old)
    args = [
        "grpc_tools.protoc",
        f"--proto_path={proto_dir}",
        f"--proto_path={well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
    ] + files
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed (exit {code}) on {', '.join(files)}")
    written = []
    for f in files:
        stem = os.path.splitext(os.path.basename(f))[0]
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            path = os.path.join(target, stem + suffix)
            if not os.path.isfile(path):
                raise RuntimeError(f"protoc did not write {path}")
            written.append(path)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proto-dir", default=DEFAULT_PROTO_DIR,
                        help="the directory holding streambp/v1/*.proto (default: %(default)s)")
    parser.add_argument("--out", default=os.path.join(HERE, "src"),
                        help="where streambp/v1/ is written (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        written = generate(args.out, args.proto_dir)
    except (OSError, RuntimeError) as e:
        print(f"generate.py: {e}", file=sys.stderr)
        return 1
    print(f"generate.py: wrote {len(written)} files under {os.path.join(args.out, PROTO_PACKAGE)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
