"""One single-node Ceph cluster in one directory: where everything lives, and its ceph.conf.

::

    <root>/ceph.conf            rendered at every start (the ports may have changed)
    <root>/made.json            written last by the bootstrap; without it the directory
                                is half made (a start was killed) and is made afresh
    <root>/<entity>.keyring     the cephx keys (0600): mon., client.admin, osd.0, client.rgw
    <root>/mon/                 the monitor's store
    <root>/osd.0/               the OSD: bluestore on a sparse file, ``block``
    <root>/rgw/, run/, crash/   radosgw's data; admin sockets and pid files; crash dumps

Every path a daemon would otherwise take from ``/etc/ceph``, ``/var/lib/ceph``,
``/var/run/ceph`` or ``/var/log/ceph`` is set here, so two clusters (two dev homes) run
side by side and nothing is written outside ``<root>``. All daemons log to stderr, which
is the dev service's log.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MON_ID = "a"
OSD_ID = 0
OSD = f"osd.{OSD_ID}"
ADMIN = "client.admin"
RGW = "client.rgw"

_BLOCK_BYTES = 10 * 2**30  # sparse: only what is written takes disk space
_OSD_MEMORY_BYTES = 939524096  # the least osd_memory_target allows (default 4 GiB)
# Ceph's chattiest subsystems, down to what matters (errors and state changes).
_QUIET = ("rocksdb", "bluestore", "bluefs", "bdev", "mon", "paxos", "osd", "ms", "rgw")


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """The cluster in ``root``, its monitor at ``host:mon_port``, radosgw at ``host:port``."""

    root: Path
    host: str
    port: int
    mon_port: int

    @property
    def conf(self) -> Path:
        return self.root / "ceph.conf"

    @property
    def marker(self) -> Path:
        return self.root / "made.json"

    @property
    def monmap(self) -> Path:
        return self.root / "monmap"

    @property
    def mon_address(self) -> str:
        return f"[v2:{self.host}:{self.mon_port}]"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def keyring(self, entity: str) -> Path:
        return self.root / f"{entity.rstrip('.')}.keyring"

    def pids(self) -> list[int]:
        """The pids in the daemons' pid files (a daemon removes its own when it stops)."""
        found = []
        for pidfile in (self.root / "run").glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                found.append(int(pidfile.read_text().strip()))
        return found

    def made(self) -> Mapping[str, object] | None:
        """What the bootstrap recorded (fsid, monitor port), or None if it never finished."""
        try:
            recorded = json.loads(self.marker.read_text())
        except (OSError, ValueError):
            return None
        return recorded if isinstance(recorded, dict) else None

    def half_made(self) -> bool:
        """Something is in ``root`` but the bootstrap never finished."""
        return self.made() is None and self.root.is_dir() and any(self.root.iterdir())

    def clear(self) -> None:
        shutil.rmtree(self.root)

    def record(self, fsid: str) -> None:
        """Mark the cluster made: the last step of the bootstrap (and of a monitor move)."""
        tmp = self.marker.with_suffix(".tmp")
        tmp.write_text(json.dumps({"fsid": fsid, "mon_port": self.mon_port}))
        tmp.replace(self.marker)

    def write_conf(self, fsid: str) -> None:
        for sub in ("run", "crash", "rgw", OSD):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        lines = (f"{name} = {value}" for name, value in self.options(fsid).items())
        self.conf.write_text("[global]\n" + "\n".join(lines) + "\n")

    def options(self, fsid: str) -> dict[str, str]:
        """ceph.conf's ``[global]`` section; ``$name`` is each daemon's entity name."""
        root, run = self.root, self.root / "run"
        return {
            "fsid": fsid,
            "mon host": self.mon_address,
            "mon initial members": MON_ID,
            "public addr": self.host,
            "cluster addr": self.host,
            "ms bind msgr1": "false",  # msgr2 only: one monitor port
            "auth cluster required": "cephx",
            "auth service required": "cephx",
            "auth client required": "cephx",
            "auth allow insecure global id reclaim": "false",
            "keyring": f"{root}/$name.keyring",
            "mon data": f"{root}/mon",
            "osd data": f"{root}/$name",
            "rgw data": f"{root}/rgw",
            "run dir": str(run),
            "admin socket": f"{run}/$name.asok",
            "pid file": f"{run}/$name.pid",  # locked by the daemon: no second one starts
            "crash dir": f"{root}/crash",
            "log to file": "false",
            "log to stderr": "true",
            "err to stderr": "true",
            "mon cluster log to file": "false",
            **{f"debug {subsystem}": "0/0" for subsystem in _QUIET},
            # one OSD: pools of one copy, few placement groups, no autoscaler (no mgr)
            "osd pool default size": "1",
            "osd pool default min size": "1",
            "osd pool default pg num": "8",
            "osd pool default pgp num": "8",
            "osd pool default pg autoscale mode": "off",
            "mon allow pool size one": "true",
            "mon warn on pool no redundancy": "false",
            "mon max pg per osd": "1000",
            "osd crush chooseleaf type": "0",
            "osd objectstore": "bluestore",
            "bluestore block create": "true",
            "bluestore block size": str(_BLOCK_BYTES),
            "osd memory target": str(_OSD_MEMORY_BYTES),
            "rgw frontends": f"beast endpoint={self.host}:{self.port} tcp_nodelay=1",
            "rgw thread pool size": "64",
            # deleted objects' tails are collected within minutes, not hours
            "rgw gc obj min wait": "300",
            "rgw gc processor period": "300",
        }
