"""Coordination primitives below the services: fenced leases and wake jobs (Redis, RQ).

Like ``session_store`` and ``bus``, this package sits below ``brain``, ``hands``,
``scheduler`` and the Session API, which meet through it without importing each other.
Redis holds hints and rights that expire; the store holds the truth: a lease's fence is
enforced by the store's claim, and a lost wake is found again by the reconciler.
"""

from coordination.protocols import Lease, LeaseStore, WakeQueue

__all__ = ["Lease", "LeaseStore", "WakeQueue"]
