"""Running Ceph's command-line tools (ceph, ceph-authtool, monmaptool, radosgw-admin).

Their output is returned, never logged: ``radosgw-admin`` prints the S3 user's secret.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Collection

from bh.devstack.errors import DevstackError

TIMEOUT_S = 120


def run(*argv: str, allowed: Collection[int] = (0,), timeout_s: float = TIMEOUT_S) -> str:
    """Run ``argv`` and return its stdout; a failure (an exit code not in ``allowed``, or
    no answer within ``timeout_s``) raises with the end of its stderr."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DevstackError(f"`{shlex.join(argv)}` did not finish in {timeout_s:g}s") from None
    except OSError as error:
        raise DevstackError(f"cannot run {argv[0]}: {error.strerror}") from None
    if done.returncode not in allowed:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise DevstackError(f"`{shlex.join(argv)}` failed (exit {done.returncode}): {tail}")
    return done.stdout
