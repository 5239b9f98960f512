"""Settings of a Session Store client."""

from __future__ import annotations

import os
import socket

from pydantic import Field

from contracts import Frozen
from runtime.build import build_id


def _default_writer() -> str:
    """``host:pid@build``: the process and the build of brainhands that wrote a commit."""
    return f"{socket.gethostname()}:{os.getpid()}@{build_id()}"


class StoreSettings(Frozen):
    """How a store client behaves; the storage location itself is the URL.

    ``baseline_every`` is K: a baseline is written after every K-th commit, and on load
    when the tail after the newest baseline is longer than K.
    """

    baseline_every: int = Field(default=100, ge=1)
    baselines_kept: int = Field(default=2, ge=1)
    # A baseline's state up to this size is kept in its record, else in a blob.
    baseline_inline_bytes: int = Field(default=64 * 1024, ge=0)
    max_record_bytes: int = Field(default=256 * 1024, ge=1024)
    max_blob_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    # Blobs are stored in chunks of at most this size (and of what the backend allows).
    blob_chunk_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    read_only: bool = False
    #: how long a workspace blob a writer touched is safe from collection without a
    #: retained version (``session_store.collection``), on the store's clock
    workspace_grace_seconds: float = Field(default=3600.0, ge=0)
    writer: str = Field(default_factory=_default_writer)
