"""Where each kind of record lives: the key layout shared by all backends.

======================================  ==========================  =====================
partition                               item                        value
======================================  ==========================  =====================
``session/<sid>/log``                   seq, 16 digits              CommitRecord (JSON)
``session/<sid>/base``                  seq, 16 digits              BaselineRecord (JSON)
``session/<sid>/base``                  ``-upload.<digest>``        Upload (JSON)
``session/<sid>/segments``              first entry, 16 digits      SegmentRecord (JSON)
``session/<sid>/tasks``                 task id                     ArchivedTask (JSON)
``session/<sid>/submissions``           request id                  ArchivedSubmission
``session/<sid>/applied``               operation id                AppliedMark (JSON)
``session/<sid>/ops``                   operation id                empty (index)
``session/<sid>/workspace``             <seq, 16 digits>.<commit>   AppliedVersion (index)
``index/active/<shard>``                session id                  empty (index)
``blob/<sha256>``                       <chunk size>.<number>       raw bytes
``blob/<sha256>``                       ``ref``                     BlobRef (JSON): whole
``workspace/touched/<shard>``           sha256                      Touch (JSON)
``workspace/condemned``                 sha256                      Touch (JSON)
``op/<operation id>/rev``               rev, 10 digits              Operation (JSON)
``op/<operation id>/result``            ``result``                  OperationResult (JSON)
``op/<operation id>/preview``           ``preview``                 OutputPreview (JSON)
``catalog/tools``                       ``<name>@<version, 6 dig>`` ToolDefinition (JSON)
``catalog/revisions/<name>@<version>``  rev, 10 digits              ToolRevision (JSON)
``fleet/hands``                         executor id                 HandsBeat (JSON)
======================================  ==========================  =====================

On S3 a key is the object ``<prefix>/<partition>/<item>``; on DynamoDB the item's
partition key ``pk`` and sort key ``sk``; on SQLite the primary key of table ``kv``.

Every builder of a session's or an operation's partition checks the id it is given
(``contracts.model.check_id``: ``InvalidInput``): the doors check ids already, and this
is the defence in depth that keeps a malformed one (``../..``, 10 kB) out of every
backend's keys whichever door forgot.
"""

from __future__ import annotations

import hashlib

from contracts.model import check_id

ACTIVE_SHARDS = 16


def _session(session_id: str) -> str:
    return check_id(session_id, "session id")


def _operation(operation_id: str) -> str:
    return check_id(operation_id, "operation id")


def seq_item(seq: int) -> str:
    return f"{seq:016d}"


def rev_item(rev: int) -> str:
    return f"{rev:010d}"


def chunk_item(chunk_bytes: int, index: int) -> str:
    # The chunk size is part of the name: writers with different chunk sizes never
    # collide on a piece of the same blob.
    return f"{chunk_bytes}.{index:06d}"


def log_partition(session_id: str) -> str:
    return f"session/{_session(session_id)}/log"


def baseline_partition(session_id: str) -> str:
    return f"session/{_session(session_id)}/base"


def segment_partition(session_id: str) -> str:
    return f"session/{_session(session_id)}/segments"


def archived_tasks_partition(session_id: str) -> str:
    return f"session/{_session(session_id)}/tasks"


def archived_submissions_partition(session_id: str) -> str:
    return f"session/{_session(session_id)}/submissions"


def applied_partition(session_id: str) -> str:
    return f"session/{_session(session_id)}/applied"


UPLOAD_PREFIX = "-upload."  # sorts before every seq item: ``last`` is always a baseline


def upload_item(digest: str) -> str:
    return f"{UPLOAD_PREFIX}{digest}"


def versions_partition(session_id: str) -> str:
    """The versions index of a session (``session_store.versions``)."""
    return f"session/{_session(session_id)}/workspace"


def session_operations_partition(session_id: str) -> str:
    return f"session/{_session(session_id)}/ops"


def active_partition(session_id: str) -> str:
    return f"index/active/{active_shard(session_id):02x}"


def active_shard(session_id: str) -> int:
    return hashlib.sha256(session_id.encode()).digest()[0] % ACTIVE_SHARDS


def active_partitions() -> list[str]:
    return [f"index/active/{shard:02x}" for shard in range(ACTIVE_SHARDS)]


def quiet_partition(session_id: str) -> str:
    """Where the quiet mark of an active session is (``session_store.index``): the same
    shard as its active marker."""
    return f"index/quiet/{active_shard(session_id):02x}"


def quiet_partitions() -> list[str]:
    return [f"index/quiet/{shard:02x}" for shard in range(ACTIVE_SHARDS)]


def blob_partition(digest: str) -> str:
    return f"blob/{digest}"


def touched_partition(digest: str) -> str:
    """Where a workspace blob's last touch is (``session_store.collection``)."""
    return f"workspace/touched/{digest[:1]}"


def touched_partitions() -> list[str]:
    return [f"workspace/touched/{shard:x}" for shard in range(16)]


#: workspace blobs a collector is deleting (``session_store.collection``)
CONDEMNED_PARTITION = "workspace/condemned"


#: a workspace blob's ref item, written once all of its chunks are: the blob is whole
#: (``session_store.workspaces``); it sorts after every chunk item
BLOB_REF_ITEM = "ref"


def operation_partition(operation_id: str) -> str:
    return f"op/{_operation(operation_id)}/rev"


def result_partition(operation_id: str) -> str:
    return f"op/{_operation(operation_id)}/result"


RESULT_ITEM = "result"


def preview_partition(operation_id: str) -> str:
    return f"op/{_operation(operation_id)}/preview"


#: the one item of a preview partition, overwritten (previews may be lost)
PREVIEW_ITEM = "preview"


TOOLS_PARTITION = "catalog/tools"

#: each Hands' last beat (``session_store.fleet``), overwritten
HANDS_PARTITION = "fleet/hands"
#: each scheduler's last beat (``session_store.fleet``), overwritten
SCHEDULERS_PARTITION = "fleet/schedulers"


def tool_item(name: str, version: int) -> str:
    return f"{name}@{version:06d}"


def tool_revisions_partition(name: str, version: int) -> str:
    return f"catalog/revisions/{tool_item(name, version)}"
