"""The Hands' side of workspaces (``docs/workspaces.md``): a local content-addressed
cache of blobs (``cache``), file operations confined to one tree (``confined``), a
session's working tree and the version it holds (``tree``), the snapshot of a run's tree
into a manifest (``snapshot``), its artifacts (``artifacts``), where trees and runs live
on this host (``layout``), what a sandbox mounts (``mount``), what the Hands need of the
store (``store``), and the executor's part of a call that mounts one (``flow``).

Nothing is imported here: ``hands.sandbox`` imports ``mount`` and ``flow`` imports
``hands.sandbox``, so this package's modules are imported by their own names.
"""
