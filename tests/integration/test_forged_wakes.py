"""Issue 13, defect 3: a wake job is a hint, never code. Anyone who can write to Redis
could enqueue an RQ job (pickled by RQ's default serializer) that ran inside a Brain,
which holds the store credentials and model keys. The Brain accepts only the wake
function with one session id, through JSON; anything else is refused and counted."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from rq import Queue
from rq.registry import FailedJobRegistry
from rq.serializers import JSONSerializer

from brain.registry import Registry
from coordination import redis_client
from coordination.wakes import JOB_FUNCTION, RQWakes, queue_name
from session_store import open_store
from session_store.submissions import SessionClient
from tests.integration.test_brain_service import _answered, _echo, brain
from tests.support.eventually import assert_eventually
from tests.support.kernel import kind
from tests.support.services import require

pytestmark = pytest.mark.redis


class _Touch:
    """Unpickling this runs a shell command: what a pickled job's meta can carry."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.path}",))


async def test_forged_wake_jobs_are_refused_counted_and_never_run(tmp_path: Path) -> None:
    url = require("BH_REDIS_URL", "Redis")
    prefix = f"t{uuid.uuid4().hex[:8]}"
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    registry = Registry()
    registry.add(kind("echo", {"start": _echo}))
    markers = [tmp_path / name for name in ("pickled-call", "pickled-meta", "json-call")]
    sync = redis_client.connect_sync(url)
    name = queue_name(prefix)
    pickled = Queue(name, connection=sync)  # RQ's default serializer: pickle
    pickled.enqueue_call("os.system", args=(f"touch {markers[0]}",))
    job = pickled.enqueue_call(JOB_FUNCTION, args=("s-meta",))
    job.meta["x"] = _Touch(markers[1])
    job.save_meta()
    as_json = Queue(name, connection=sync, serializer=JSONSerializer)
    as_json.enqueue_call("os.system", args=(f"touch {markers[2]}",))
    as_json.enqueue_call(JOB_FUNCTION, args=({"not": "a session id"},))
    as_json.enqueue_call(JOB_FUNCTION, args=("s-x",), kwargs={"extra": 1})
    as_json.enqueue_call(JOB_FUNCTION, args=("../" * 200,))
    client = SessionClient(store)
    wakes = RQWakes(url, prefix=prefix)
    try:
        async with brain(store, url, prefix, "brain-a", registry) as service:
            # the Brain goes on: a real wake behind the forged ones is answered
            await client.submit("s-ok", "r1", {"task": {"kind": "echo", "input": 1}})
            await wakes.wake("s-ok", reason="submission")
            await assert_eventually(lambda: _answered(store, "s-ok", "r1"), within=30)
            await asyncio.sleep(0.5)
            assert [marker.exists() for marker in markers] == [False, False, False]
            assert sum(service.refused_wakes.values()) == 6, service.refused_wakes
            exported = service.metrics.registry.collect()
            counted = sum(
                sample.value
                for family in exported
                for sample in family.samples
                if sample.name == "brainhands_brain_wakes_refused_total"
            )
            assert counted == 6, "each refused wake is in the Brain's metrics"
        failed = FailedJobRegistry(queue=as_json)  # rq info shows them
        assert len(failed.get_job_ids()) == 6
        statuses = {sync.hget(f"rq:job:{job_id}", "status") for job_id in failed.get_job_ids()}
        assert statuses == {b"failed"}
    finally:
        wakes.close()
        sync.close()
        await store.close()
