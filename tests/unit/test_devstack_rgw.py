"""Pure logic of the rgw dev service: its settings, the cluster directory, the keys file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bh.devstack import catalog
from bh.devstack.config import DevConfig
from bh.devstack.rgw import user
from bh.devstack.rgw.cluster import Cluster
from bh.devstack.state import StateDir
from runtime.credentials import write_secret


def _cluster(root: Path) -> Cluster:
    return Cluster(root=root, host="127.0.0.1", port=27480, mon_port=23300)


def test_ports_and_exports_come_from_the_environment(tmp_path: Path) -> None:
    environ = {"BH_DEV_HOME": str(tmp_path), "BH_DEV_RGW_PORT": "27480"}
    config = DevConfig.from_env({**environ, "BH_DEV_CEPH_MON_PORT": "23300"})
    (rgw,) = [s for s in catalog.services(config, StateDir(tmp_path), print) if s.name == "rgw"]
    assert rgw.ports == (27480, 23300)
    assert rgw.exports == {
        "BH_RGW_ENDPOINT_URL": "http://127.0.0.1:27480",
        "BH_RGW_CREDENTIALS_FILE": f"{tmp_path}/secrets/rgw.credentials",
    }


def test_every_path_the_daemons_use_is_inside_the_cluster_directory(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path / "rgw")
    options = cluster.options(fsid="f")
    paths = [value for value in options.values() if value.startswith("/")]
    for name in ("keyring", "mon data", "osd data", "rgw data", "run dir", "pid file"):
        assert options[name].startswith(f"{tmp_path}/rgw/"), name
    assert all(path.startswith(f"{tmp_path}/rgw") for path in paths), paths
    assert options["mon host"] == "[v2:127.0.0.1:23300]"
    assert options["rgw frontends"].startswith("beast endpoint=127.0.0.1:27480")


def test_a_cluster_is_made_only_once_its_marker_is_written(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path / "rgw")
    assert not cluster.half_made() and cluster.made() is None  # nothing there yet
    cluster.write_conf(fsid="f")
    assert cluster.half_made(), "files without the marker: a start was killed mid-way"
    cluster.record(fsid="f")
    assert not cluster.half_made()
    assert cluster.made() == {"fsid": "f", "mon_port": 23300}
    cluster.marker.write_text("{torn")
    assert cluster.half_made()


def test_keys_are_read_only_from_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "rgw.credentials"
    keys = user.Keys("AKIDEXAMPLE", "s3cr3t")
    assert "s3cr3t" not in repr(keys)
    assert user.read(path) is None
    write_secret(path, keys.render())
    assert user.read(path) == keys
    path.chmod(0o644)
    assert user.read(path) is None, "a file others can read holds no secret"
    write_secret(path, "[default]\naws_access_key_id = only-half\n")
    assert user.read(path) is None


def test_plain_up_leaves_rgw_out(tmp_path: Path) -> None:
    without = [arg for name in ("redis", "nats", "moto", "docker") for arg in ("--without", name)]
    done = subprocess.run(
        [sys.executable, "-m", "bh.cli", "dev", "up", *without],
        env={**os.environ, "BH_DEV_HOME": str(tmp_path), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rgw = next(line for line in done.stdout.splitlines() if "│ rgw " in line)
    assert "skipped" in rgw
    assert not (tmp_path / "data" / "rgw").exists()
