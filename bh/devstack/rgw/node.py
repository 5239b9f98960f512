"""The process ``bh dev`` starts for the rgw service: it runs the cluster's three daemons.

It makes the cluster if there is none (clearing a half-made one first), starts the
monitor, the OSD and radosgw as its children, makes sure the S3 user exists and its keys
are in the credentials file, then waits. It exits when a daemon exits (so ``bh dev up``
sees the service down and starts it again), and on SIGTERM stops radosgw, then the OSD,
then the monitor. That order matters: an OSD stopped while its monitor runs is recorded
down, and the next start is ready in ~5 s; stopped together, the monitor still believes
the old OSD up, and radosgw's first reads wait ~10 s for it. So the daemons run in
sessions of their own, out of reach of the signal ``bh dev down`` sends this process's
group; they get SIGKILL should this process die without stopping them (with SIGTERM, an
OSD whose monitor was going down with it could wait on the monitor for minutes; every
daemon's store survives SIGKILL, as it survives the machine going down), and the next
start waits for such leftovers to exit.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import FrameType

from bh.devstack import probe
from bh.devstack.errors import DevstackError
from bh.devstack.poll import poll_until
from bh.devstack.rgw import bootstrap, user
from bh.devstack.rgw.cluster import MON_ID, OSD_ID, RGW, Cluster

_READY_TIMEOUT = timedelta(minutes=3)
_STOP_TIMEOUT_S = 20
_GRACE = timedelta(seconds=30)  # for daemons left by an earlier run to exit
_PR_SET_PDEATHSIG = 1


class _Stop(Exception):
    """SIGTERM or SIGINT arrived."""


class Node:
    """The cluster's daemons, children of this process."""

    def __init__(self, cluster: Cluster, credentials: Path) -> None:
        self._cluster = cluster
        self._credentials = credentials
        self._daemons: dict[str, subprocess.Popen[bytes]] = {}  # program -> its process

    def run(self) -> int:
        """Start and watch the daemons until one exits (-> 1) or a stop signal (-> 0)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, _raise_stop)
        try:
            self._start()
            say(f"ready: S3 at {self._cluster.endpoint}, user {user.UID}")
            return self._watch()
        except _Stop:
            return 0
        except DevstackError as error:
            say(f"error: {error}")
            return 1
        finally:
            self._stop()

    def _start(self) -> None:
        cluster = self._cluster
        if cluster.half_made():
            say(f"{cluster.root} is half made (an earlier start was killed): making it afresh")
            cluster.clear()
        self._await_leftovers()
        made = cluster.made()
        if made is None:
            say(f"making a new cluster in {cluster.root}")
            fsid = bootstrap.keys_and_monitor(cluster)
        else:
            fsid = str(made["fsid"])
            cluster.write_conf(fsid)
            if made.get("mon_port") != cluster.mon_port:
                say(f"moving the monitor to port {cluster.mon_port}")
                bootstrap.move_monitor(cluster)
                cluster.record(fsid)
        self._spawn("ceph-mon", "-i", MON_ID)
        if made is None:
            bootstrap.osd(cluster)
            cluster.record(fsid)
        self._spawn("ceph-osd", "-i", str(OSD_ID))
        self._spawn("radosgw", "-n", RGW)
        self._await_gateway()
        user.ensure(cluster, self._credentials)

    def _await_leftovers(self) -> None:
        """Daemons of an earlier run (their supervisor died) hold the ports, the stores'
        locks and the pid files: wait for them to exit, then kill what is left."""
        conf = str(self._cluster.conf)
        leftovers = [pid for pid in self._cluster.pids() if _runs_with(pid, conf)]
        if not leftovers:
            return
        say(f"waiting for {len(leftovers)} daemon(s) of an earlier run to exit")
        if poll_until(lambda: not any(_runs_with(pid, conf) for pid in leftovers), timeout=_GRACE):
            return
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _spawn(self, program: str, *args: str) -> None:
        argv = (program, "-f", "-c", str(self._cluster.conf), *args)
        say(f"starting {' '.join(argv)}")
        try:
            daemon = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent
            )
        except OSError as error:
            raise DevstackError(f"cannot run {program}: {error.strerror}") from None
        self._daemons[program] = daemon

    def _await_gateway(self) -> None:
        host, port = self._cluster.host, self._cluster.port
        if not poll_until(
            lambda: probe.http_status(host, port, "/") == 200,
            timeout=_READY_TIMEOUT,
            give_up=self._one_exited,
        ):
            raise DevstackError(self._exited() or f"radosgw did not answer on {host}:{port}")

    def _watch(self) -> int:
        """Block until a daemon exits (its status is left for ``Popen`` to collect)."""
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        say(self._exited() or "a child exited")
        return 1

    def _one_exited(self) -> bool:
        return any(daemon.poll() is not None for daemon in self._daemons.values())

    def _exited(self) -> str:
        gone = {name: d for name, d in self._daemons.items() if d.poll() is not None}
        return "; ".join(f"{name} exited with status {d.returncode}" for name, d in gone.items())

    def _stop(self) -> None:
        """radosgw, then the OSD, then the monitor: each stops cleanly while the ones it
        talks to still run."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)
        for daemon in reversed(self._daemons.values()):
            daemon.terminate()
            try:
                daemon.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


def say(message: str) -> None:
    print(f"bh dev rgw: {message}", file=sys.stderr, flush=True)


def _runs_with(pid: int, argument: str) -> bool:
    """True if a live process ``pid`` has ``argument`` on its command line."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return argument.encode() in cmdline.split(b"\0")


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def _die_with_parent() -> None:
    """In the child: get SIGKILL when this process dies, however it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
