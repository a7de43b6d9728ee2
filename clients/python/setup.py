"""Builds the streambp package; the metadata is in pyproject.toml.

The protobuf and gRPC modules (streambp/v1/*_pb2*.py) are generated from the
repository's protos (../../proto) while the package is built, so no generated
code is kept in the repository and an installed client always matches the
protos of the tree it came from. An sdist carries the generated modules, so it
builds without the protos.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate  # noqa: E402  (generate.py beside this file)

SRC = os.path.join(HERE, "src")


def have_protos():
    return os.path.isdir(os.path.join(generate.DEFAULT_PROTO_DIR, generate.PROTO_PACKAGE))


def have_generated():
    return os.path.isfile(os.path.join(SRC, generate.PROTO_PACKAGE, "jobs_pb2.py"))


class BuildPy(build_py):
    """Generates the modules into the build directory, then copies the sources."""

    def run(self):
        super().run()
        # An editable install imports from src/: generate there.
        out = SRC if getattr(self, "editable_mode", False) else self.build_lib
        if not self.dry_run and have_protos():
            generate.generate(out)
        elif not have_generated():
            raise SystemExit(
                f"streambp: no protos at {generate.DEFAULT_PROTO_DIR} and no generated modules "
                f"under {SRC}: build from the StreamBP repository's clients/python")


class Sdist(sdist):
    """Generates the modules into src/ first, so that the sdist carries them."""

    def run(self):
        if have_protos():
            generate.generate(SRC)
        super().run()


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
