"""Making a cluster from an empty directory, in two halves around the monitor's start.

``keys_and_monitor`` needs no daemon: cephx keys for every entity (imported into the
monitor's keyring, so the monitor knows them from its first start), the monitor map and
the monitor's store. ``osd`` needs the monitor running: it registers OSD 0 and makes its
bluestore. Only then is the cluster recorded as made (``Cluster.record``); a start
killed before that leaves a half-made directory, which the next start clears.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from bh.devstack.rgw import tools
from bh.devstack.rgw.cluster import ADMIN, MON_ID, OSD, OSD_ID, RGW, Cluster

_MON = "mon."
#: entity -> its capabilities (the monitor's own key has every right on the monitor)
CAPS: Mapping[str, Mapping[str, str]] = {
    _MON: {"mon": "allow *"},
    ADMIN: {"mon": "allow *", "osd": "allow *", "mgr": "allow *"},
    OSD: {"mon": "allow profile osd", "mgr": "allow profile osd", "osd": "allow *"},
    RGW: {"mon": "allow rw", "osd": "allow rwx"},
}


def keys_and_monitor(cluster: Cluster) -> str:
    """Write the keys, the config and the monitor's store; return the new cluster's fsid."""
    fsid = str(uuid.uuid4())
    cluster.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    cluster.write_conf(fsid)
    for entity, caps in CAPS.items():
        _new_key(cluster, entity, caps)
        if entity != _MON:
            imported = ("--import-keyring", str(cluster.keyring(entity)))
            tools.run("ceph-authtool", str(cluster.keyring(_MON)), *imported)
    monmap = str(cluster.monmap)
    tools.run(
        "monmaptool", "--create", "--addv", MON_ID, cluster.mon_address, "--fsid", fsid, monmap
    )
    keyring = ("--keyring", str(cluster.keyring(_MON)))
    tools.run(*_monitor(cluster), "--mkfs", "--monmap", monmap, *keyring)
    return fsid


def osd(cluster: Cluster) -> None:
    """Register OSD 0 with the running monitor and make its bluestore (a sparse file)."""
    osd_uuid = str(uuid.uuid4())
    tools.run(
        *admin(cluster, "ceph"), "--connect-timeout", "60", "osd", "new", osd_uuid, str(OSD_ID)
    )
    tools.run(
        "ceph-osd", "-c", str(cluster.conf), "--mkfs", "-i", str(OSD_ID), "--osd-uuid", osd_uuid
    )


def move_monitor(cluster: Cluster) -> None:
    """Give the (stopped) monitor its new address: the monitor map baked into its store
    at ``--mkfs`` still names the old port, and the monitor would not start."""
    monmap = str(cluster.monmap)
    tools.run(*_monitor(cluster), "--extract-monmap", monmap)
    tools.run("monmaptool", monmap, "--rm", MON_ID)
    tools.run("monmaptool", monmap, "--addv", MON_ID, cluster.mon_address)
    tools.run(*_monitor(cluster), "--inject-monmap", monmap)


def admin(cluster: Cluster, program: str) -> tuple[str, ...]:
    """``program`` (ceph, radosgw-admin) as ``client.admin`` of this cluster."""
    return (program, "-c", str(cluster.conf), "-n", ADMIN)


def _monitor(cluster: Cluster) -> tuple[str, ...]:
    return ("ceph-mon", "-c", str(cluster.conf), "-i", MON_ID)


def _new_key(cluster: Cluster, entity: str, caps: Mapping[str, str]) -> None:
    path = cluster.keyring(entity)
    grants = [arg for kind, grant in caps.items() for arg in ("--cap", kind, grant)]
    tools.run("ceph-authtool", "--create-keyring", str(path), "--gen-key", "-n", entity, *grants)
    path.chmod(0o600)
