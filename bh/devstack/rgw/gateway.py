"""radosgw as a dev service: installed on first use, its S3 user's keys in a 0600 file.

Debian's ``ceph-mon``, ``ceph-osd`` and ``radosgw`` (Ceph 16.2, about 61 MB with what
they need) are installed with apt-get when missing, as root, before the first start. The
service counts as ready only when radosgw answers a request signed with the user's keys.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from datetime import timedelta

from bh.devstack import apt, binaries, probe
from bh.devstack.auth import Secrets
from bh.devstack.config import DevConfig
from bh.devstack.errors import DevstackError
from bh.devstack.process import Argv
from bh.devstack.rgw import user
from bh.devstack.rgw.cluster import Cluster
from bh.devstack.service import Service
from bh.devstack.state import StateDir

PACKAGES = ("ceph-mon", "ceph-osd", "radosgw")
#: the programs the cluster needs; any missing means (re)installing the packages
PROGRAMS = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "ceph-authtool")
_SKIP_HINT = "or leave rgw out: `bh dev up` starts it only with --require rgw"


def service(config: DevConfig, state: StateDir, say: Callable[[str], None]) -> Service:
    """The rgw service: its cluster in ``<home>/data/rgw``, keys in ``<home>/secrets``."""
    cluster = Cluster(
        root=state.root / "data" / "rgw",
        host=config.host,
        port=config.ports.rgw,
        mon_port=config.ports.ceph_mon,
    )
    credentials = Secrets(state.secrets).rgw_credentials
    log = state.log("rgw")

    def launches() -> tuple[Argv, ...]:
        missing = missing_programs()
        if missing:
            raise DevstackError(f"{', '.join(missing)} not found: install {' '.join(PACKAGES)}")
        where = ("--root", str(cluster.root), "--host", cluster.host)
        ports = ("--port", str(cluster.port), "--mon-port", str(cluster.mon_port))
        module = (sys.executable, "-m", "bh.devstack.rgw")
        return ((*module, *where, *ports, "--credentials", str(credentials)),)

    def prepare() -> None:
        if missing_programs():
            say(f"rgw: installing {' '.join(PACKAGES)} with apt-get (output in {log})")
            apt.install(PACKAGES, log, skip_hint=_SKIP_HINT, recommends=False)

    def ready() -> bool:
        keys = user.read(credentials)
        if keys is None:
            return False
        status = probe.s3_status(
            cluster.host, cluster.port, access_key=keys.access_key, secret_key=keys.secret_key
        )
        return status == 200

    return Service(
        name="rgw",
        address=cluster.endpoint,
        ports=(cluster.port, cluster.mon_port),
        launches=launches,
        ready=ready,
        exports={
            "BH_RGW_ENDPOINT_URL": cluster.endpoint,
            "BH_RGW_CREDENTIALS_FILE": str(credentials),
        },
        log_path=log,
        pid_path=state.pidfile("rgw"),
        # a first start makes the cluster: ~20 s here, more on a loaded machine
        ready_timeout=timedelta(minutes=3),
        stop_timeout=timedelta(seconds=60),
        prepare=prepare,
        detail=lambda: f"S3 user {user.UID}, keys in {credentials}",
        child_env={"PATH": binaries.system_path()},
    )


def missing_programs() -> list[str]:
    """The programs of PROGRAMS not installed (on PATH or in the sbin directories)."""
    path = binaries.system_path()
    return [program for program in PROGRAMS if shutil.which(program, path=path) is None]
