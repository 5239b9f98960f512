"""radosgw, Ceph's S3 server, as a dev service: a single-node cluster (one monitor, one
bluestore OSD on a sparse file, one radosgw with the beast frontend) under the dev home.

``gateway`` describes the service to the stack; ``node`` is the process it runs, which
makes the cluster (``cluster``, ``bootstrap``) and the S3 user (``user``) when missing.
"""
