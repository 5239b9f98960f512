"""`bh dev up --require rgw` runs radosgw on a single-node Ceph cluster in the dev home.

Real Ceph daemons (ceph-mon, ceph-osd, radosgw) in a dev home and on ports of their own:
the first start makes the cluster (clearing a half-made directory), a second `up` keeps
it, `restart` (here onto a new monitor port) and crashes (SIGKILL of the supervisor
alone, then of every process) keep its objects, `down` stops every daemon. The S3
user's keys stay in their 0600 file: never in the output, the env file or the log.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import botocore.session
import psutil
import pytest
from botocore.exceptions import ClientError

from bh.devstack import probe
from bh.devstack.poll import poll_until
from bh.devstack.process import read_pidfile
from bh.devstack.rgw import gateway, user
from tests.support.services import bh_dev, free_ports, missing

pytestmark = [pytest.mark.s3, pytest.mark.slow]

_BH_TIMEOUT_S = 280  # a first up may install Ceph (~25 s) and make the cluster (~20 s)
_ONLY_RGW = tuple(
    arg for name in ("redis", "nats", "moto", "docker") for arg in ("--without", name)
)


@dataclass
class DevHome:
    """A dev home of the test's own, with the environment `bh dev` runs in there."""

    env: dict[str, str]
    first_up: subprocess.CompletedProcess[str]

    @property
    def root(self) -> Path:
        return Path(self.env["BH_DEV_HOME"])

    @property
    def cluster(self) -> Path:
        return self.root / "data" / "rgw"

    @property
    def credentials(self) -> Path:
        return self.root / "secrets" / "rgw.credentials"

    @property
    def port(self) -> int:
        return int(self.env["BH_DEV_RGW_PORT"])

    def bh(self, *args: str) -> subprocess.CompletedProcess[str]:
        return bh_dev(*args, env=self.env, timeout_s=_BH_TIMEOUT_S)

    def s3(self) -> Any:
        keys = user.read(self.credentials)
        assert keys is not None, f"no readable keys in {self.credentials}"
        return botocore.session.get_session().create_client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{self.port}",
            region_name="us-east-1",
            aws_access_key_id=keys.access_key,
            aws_secret_access_key=keys.secret_key,
        )

    def supervisor_pid(self) -> int:
        record = read_pidfile(self.root / "run" / "rgw.pid")
        assert record is not None, "no pidfile for rgw"
        return record.pid


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevHome]:
    """The first `up`, over a half-made cluster directory (a start killed mid-way)."""
    if gateway.missing_programs() and os.geteuid() != 0:
        missing("Ceph is not installed and only root may install it (apt-get, by bh dev up)")
    root = tmp_path_factory.mktemp("dev")
    services = ("REDIS", "NATS", "NATS_HTTP", "MOTO", "RGW", "CEPH_MON")
    ports = dict(zip(services, free_ports(len(services)), strict=True))
    env = {
        **os.environ,
        "BH_DEV_HOME": str(root),
        **{f"BH_DEV_{name}_PORT": str(port) for name, port in ports.items()},
        "COLUMNS": "250",
    }
    leftover = root / "data" / "rgw" / "mon" / "store.db"
    leftover.mkdir(parents=True)
    (leftover / "000003.log").write_bytes(b"half a monitor store")
    first_up = bh_dev("up", "--require", "rgw", *_ONLY_RGW, env=env, timeout_s=_BH_TIMEOUT_S)
    yield DevHome(env=env, first_up=first_up)
    bh_dev("down", env=env, timeout_s=_BH_TIMEOUT_S)


def _row(done: subprocess.CompletedProcess[str], *, exit_code: int = 0) -> str:
    """The rgw line of a `bh dev` table."""
    assert done.returncode == exit_code, done.stdout + done.stderr
    return next(line for line in done.stdout.splitlines() if "│ rgw " in line)


def test_first_up_makes_a_cluster_over_a_half_made_one_and_serves_s3(home: DevHome) -> None:
    assert "started" in _row(home.first_up)
    assert not (home.cluster / "mon" / "store.db" / "000003.log").exists()
    assert (home.cluster / "made.json").is_file()
    s3 = home.s3()
    s3.create_bucket(Bucket="first")
    s3.put_object(Bucket="first", Key="k", Body=b"v1", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket="first", Key="k", Body=b"v2", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.get_object(Bucket="first", Key="k")["Body"].read() == b"v1"


def test_keys_stay_in_their_private_file(home: DevHome) -> None:
    assert stat.S_IMODE(home.credentials.stat().st_mode) == 0o600
    keys = user.read(home.credentials)
    assert keys is not None
    exported = home.bh("env")
    assert f"export BH_RGW_CREDENTIALS_FILE={home.credentials}" in exported.stdout
    assert f"export BH_RGW_ENDPOINT_URL=http://127.0.0.1:{home.port}" in exported.stdout
    shown = [home.first_up.stdout, home.first_up.stderr, exported.stdout, exported.stderr]
    shown += [(home.root / "env").read_text(), (home.root / "logs" / "rgw.log").read_text()]
    assert not [text for text in shown if keys.secret_key in text]
    anonymous = probe.http_status("127.0.0.1", home.port, "/first/k")
    assert anonymous == 403, "an object must not be readable without the keys"


def test_up_again_restart_crashes_and_down_keep_objects_until_down(home: DevHome) -> None:
    s3 = home.s3()
    s3.create_bucket(Bucket="kept")
    s3.put_object(Bucket="kept", Key="k", Body=b"kept", IfNoneMatch="*")
    pid = home.supervisor_pid()

    assert "already running" in _row(home.bh("up", *_ONLY_RGW))  # no --require: kept up
    assert home.supervisor_pid() == pid

    home.env["BH_DEV_CEPH_MON_PORT"] = str(free_ports(1)[0])  # the monitor moves too
    assert "started" in _row(home.bh("restart", "rgw"))
    assert home.supervisor_pid() != pid
    assert _read(home, "kept", "k") == b"kept"

    # The supervisor alone dies: its daemons follow (they run in sessions of their own).
    os.kill(home.supervisor_pid(), signal.SIGKILL)
    assert poll_until(lambda: not _daemons_of(home.cluster), timeout=timedelta(seconds=60))
    # status fails: the core services are not running in this dev home
    assert "not running" in _row(home.bh("status"), exit_code=1)
    _assert_recovers(home)

    # Everything dies at once, as with the machine: every pid file is left behind.
    for process in _daemons_of(home.cluster):
        process.kill()
    _assert_recovers(home)

    assert "stopped" in _row(home.bh("down"))
    assert not _daemons_of(home.cluster)
    assert not probe.tcp_open("127.0.0.1", home.port)


def _assert_recovers(home: DevHome) -> None:
    restarted = _row(home.bh("up", *_ONLY_RGW))
    assert "started" in restarted and "stale pidfile" in restarted
    assert _read(home, "kept", "k") == b"kept"


def _read(home: DevHome, bucket: str, key: str) -> bytes:
    body: bytes = home.s3().get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def _daemons_of(cluster: Path) -> list[psutil.Process]:
    """The supervisor and daemons of the cluster: their command lines name its directory."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(str(cluster) in argument for argument in process.info["cmdline"] or ()):
            found.append(process)
    return found
