"""The entry point of the rgw image: the dev stack's single-node Ceph cluster
(``bh.devstack.rgw``) in a container, serving S3 on ``0.0.0.0:9000`` to the deployment's
network, with the S3 keys of the deployment's secrets.

The monitor and the OSD listen on the container's loopback (nothing outside needs them,
and the address stays the same when the container is recreated on another IP). The
cluster lives in ``--root`` (``/data``, the deployment's volume: restarting the
container keeps the objects).

Keys: like ``minio/minio``, the access key and the secret key are read from the secret
files ``MINIO_ROOT_USER_FILE`` and ``MINIO_ROOT_PASSWORD_FILE`` name (a name under
``/run/secrets``, or a path), so the same compose secrets serve both images. The S3
user gets them as its key (added once; radosgw-admin reads them from ``CEPH_ARGS`` in
its environment, not from its command line, which every user of the host can read in
``ps``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bh.devstack.rgw import tools
from bh.devstack.rgw.bootstrap import admin
from bh.devstack.rgw.cluster import Cluster
from bh.devstack.rgw.node import Node, say
from bh.devstack.rgw.user import UID

SECRETS = Path("/run/secrets")
S3_PORT = int(os.environ.get("RGW_PORT", "9000"))
MON_PORT = 3300


@dataclass(frozen=True, kw_only=True)
class ContainerCluster(Cluster):
    """The cluster on loopback, its S3 frontend on every address of the container."""

    def options(self, fsid: str) -> dict[str, str]:
        options = super().options(fsid)
        options["rgw frontends"] = f"beast endpoint=0.0.0.0:{self.port} tcp_nodelay=1"
        return options


class Gateway(Node):
    """The dev stack's node, whose S3 user also gets the deployment's key."""

    def __init__(self, cluster: Cluster, access_key: str, secret_key: str) -> None:
        # the generated key's file stays in the cluster's directory (0600, the volume)
        super().__init__(cluster, cluster.root / "generated.credentials")
        self._access_key = access_key
        self._secret_key = secret_key

    def _start(self) -> None:
        super()._start()
        info = json.loads(
            tools.run(*admin(self._cluster, "radosgw-admin"), "user", "info", "--uid", UID)
        )
        if any(key.get("access_key") == self._access_key for key in info.get("keys", [])):
            return
        os.environ["CEPH_ARGS"] = f"--access-key={self._access_key} --secret-key={self._secret_key}"
        try:
            tools.run(
                *admin(self._cluster, "radosgw-admin"),
                "key",
                "create",
                "--uid",
                UID,
                "--key-type",
                "s3",
            )
        finally:
            del os.environ["CEPH_ARGS"]
        say(f"the S3 user {UID} has the deployment's key")


def _secret(variable: str) -> str:
    name = os.environ.get(variable)
    if not name:
        sys.exit(f"rgw: {variable} must name the secret file holding the S3 key")
    return (SECRETS / name).read_text().strip()  # an absolute name stays itself


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="serve.py")
    parser.add_argument("--root", type=Path, default=Path("/data"), help="the cluster's home")
    root = parser.parse_args().root
    cluster = ContainerCluster(root=root, host="127.0.0.1", port=S3_PORT, mon_port=MON_PORT)
    node = Gateway(cluster, _secret("MINIO_ROOT_USER_FILE"), _secret("MINIO_ROOT_PASSWORD_FILE"))
    raise SystemExit(node.run())
