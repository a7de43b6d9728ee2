"""The built `sbp` the Python tool tests drive: $SBP_CLI, default
build/bin/sbp of this checkout."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SBP = os.path.abspath(os.environ.get("SBP_CLI", os.path.join(ROOT, "build", "bin", "sbp")))


def run(args, cwd):
    """Runs `sbp ARGS` in cwd; AssertionError with its output when it fails."""
    result = subprocess.run([SBP] + args, cwd=cwd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"sbp {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result
