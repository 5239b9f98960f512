"""``python -m bh.devstack.rgw --root DIR --port N --mon-port N --credentials FILE``: the
process the rgw dev service runs (``bh.devstack.rgw.node``)."""

import argparse
from pathlib import Path

from bh.devstack.config import LOOPBACK
from bh.devstack.rgw.cluster import Cluster
from bh.devstack.rgw.node import Node

parser = argparse.ArgumentParser(prog="python -m bh.devstack.rgw")
parser.add_argument("--root", type=Path, required=True, help="the cluster's directory")
parser.add_argument("--host", default=LOOPBACK)
parser.add_argument("--port", type=int, required=True, help="radosgw's S3 port")
parser.add_argument("--mon-port", type=int, required=True, help="the Ceph monitor's port")
parser.add_argument("--credentials", type=Path, required=True, help="the S3 keys' file")
args = parser.parse_args()
cluster = Cluster(root=args.root, host=args.host, port=args.port, mon_port=args.mon_port)
raise SystemExit(Node(cluster, args.credentials).run())
