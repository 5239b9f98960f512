"""The Hands' side of workspaces on the process sandbox (``docs/workspaces.md``): a call
that mounts the workspace read-write sees the files of the version it starts from, and
its result records the version its tree became — whatever its exit code, never after a
timeout — refusing what a workspace may not hold, within its limits, uploading only the
blobs the store lacks and hashing only the files that changed."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from contracts import BlobRef, InvalidInput, OperationResult, ReplayPolicy
from contracts.errors import WorkspaceRefused
from contracts.tool import Dispatch, ResultEvent, ToolDefinition
from contracts.workspace import (
    EntryKind,
    Manifest,
    ManifestEntry,
    WorkspaceAccess,
    WorkspaceLimits,
    WorkspaceMode,
    WorkspaceMount,
    WorkspaceVersion,
)
from hands.executor import Executor
from hands.sandbox import RunSpec
from hands.sandbox.pool import WarmPool
from hands.sandbox.process import ProcessSandbox
from hands.settings import HandsSettings
from hands.workspace.cache import BlobCache
from hands.workspace.confined import checked
from hands.workspace.flow import WorkspaceFlow
from hands.workspace.snapshot import scan
from hands.workspace.tree import materialise
from session_store import SessionStore, open_store
from tests.support.eventually import assert_eventually
from tests.support.intents import CommittingExecutor

pytestmark = pytest.mark.sqlite

# Does what its arguments say in $BH_WORKSPACE and $BH_ARTIFACTS, then prints what it read.
TOOL = """
import json, os, socket, sys, time
args = json.loads(os.environ["BH_ARGUMENTS"])
root, published = os.environ["BH_WORKSPACE"], os.environ["BH_ARTIFACTS"]
read = {}
for path in args.get("read", []):
    where = os.path.join(root, path)
    read[path] = os.readlink(where) if os.path.islink(where) else open(where).read()
for path, text in args.get("write", {}).items():
    os.makedirs(os.path.dirname(os.path.join(root, path)) or root, exist_ok=True)
    with open(os.path.join(root, path), "w") as file:
        file.write(text)
for path in args.get("delete", []):
    os.unlink(os.path.join(root, path))
for path, target in args.get("link", {}).items():
    os.symlink(target, os.path.join(root, path))
for name, text in args.get("publish", {}).items():
    with open(os.path.join(published, name), "w") as file:
        file.write(text)
hostile = args.get("hostile")
if hostile == "fifo":
    os.mkfifo(os.path.join(root, "pipe"))
elif hostile == "socket":
    socket.socket(socket.AF_UNIX).bind(os.path.join(root, "sock"))
elif hostile == "setuid":
    open(os.path.join(root, "suid"), "w").close()
    os.chmod(os.path.join(root, "suid"), 0o4755)
elif hostile == "device":
    os.mknod(os.path.join(root, "null"), 0o600 | 0o20000, os.makedev(1, 3))
marker = args.get("unknown_once")  # the first attempt leaves a file and exits 75
if marker and not os.path.exists(marker):
    open(marker, "w").close()
    with open(os.path.join(root, "partial"), "w") as file:
        file.write("half written")
    sys.exit(75)
if marker:
    read["partial seen"] = os.path.exists(os.path.join(root, "partial"))
inodes = {path: os.lstat(os.path.join(root, path)).st_ino for path in args.get("inode", [])}
time.sleep(args.get("sleep", 0))
print(json.dumps({"read": read, **({"inode": inodes} if inodes else {})}))
sys.exit(args.get("exit", 0))
"""


class CountingVersions:
    """The store's workspace side, counting the file blobs asked about and put."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store.workspaces
        self.put: list[int] = []
        self.asked: list[set[str]] = []

    async def missing(self, digests: Iterable[str]) -> set[str]:
        wanted = set(digests)
        self.asked.append(wanted)
        return await self._store.missing(wanted)

    async def put_file(self, data: bytes) -> BlobRef:
        self.put.append(len(data))
        return await self._store.put_file(data)

    async def file(self, entry: ManifestEntry) -> bytes:
        return await self._store.file(entry)

    async def put_version(
        self, manifest: Manifest, *, base: WorkspaceVersion | None
    ) -> WorkspaceVersion:
        return await self._store.put_version(manifest, base=base)

    async def manifest(self, version: WorkspaceVersion) -> Manifest:
        return await self._store.manifest(version)


@dataclass
class Hands:
    store: SessionStore
    sandbox: ProcessSandbox
    root: Path
    versions: CountingVersions
    events: list[ResultEvent] = field(default_factory=list)

    def flow(self) -> WorkspaceFlow:
        return WorkspaceFlow(self.versions, root=self.root)

    def executor(self, name: str = "hands-a", flow: WorkspaceFlow | None = None) -> Executor:
        async def publish(event: ResultEvent) -> None:
            self.events.append(event)

        return CommittingExecutor(
            store=self.store,
            sandbox=self.sandbox,
            publish=publish,
            executor_id=name,
            workspaces=flow or self.flow(),
        )


@pytest.fixture
async def hands(tmp_path: Path) -> AsyncIterator[Hands]:
    store = await open_store(f"sqlite:///{tmp_path / 'store.db'}")
    for mode, timeout in ((WorkspaceMode.WRITE, 20), (WorkspaceMode.READ, 20)):
        await store.tools.register(_coder(f"coder-{mode.value}", mode, timeout))
    await store.tools.register(_coder("slow", WorkspaceMode.WRITE, 1))
    h = Hands(store, ProcessSandbox(tmp_path / "runs"), tmp_path / "ws", CountingVersions(store))
    yield h
    await store.close()


def _coder(name: str, mode: WorkspaceMode, timeout: int) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        version=1,
        parameters={"type": "object"},
        replay=ReplayPolicy.SAFE,
        timeout_s=timeout,
        command=(sys.executable, "-c", TOOL),
        workspace=WorkspaceAccess(mode=mode),
        image=f"test/{name}",
        image_id=f"sha256:{name}",
    )


def call(
    op: str,
    base: WorkspaceVersion | None = None,
    *,
    tool: str = "coder-rw",
    limits: WorkspaceLimits = WorkspaceLimits(),  # noqa: B008 (frozen)
    **args: Any,
) -> Dispatch:
    mode = WorkspaceMode.READ if tool.endswith("-ro") else WorkspaceMode.WRITE
    return Dispatch(
        operation_id=op,
        session_id="s1",
        task_id="t1",
        tool=tool,
        tool_version=1,
        args=args,
        workspace=WorkspaceMount(mode=mode, base=base, limits=limits),
    )


async def run(hands: Hands, d: Dispatch, executor: Executor | None = None) -> OperationResult:
    result = await (executor or hands.executor()).handle(d)
    assert result is not None
    return result


async def files(hands: Hands, version: WorkspaceVersion) -> dict[str, str]:
    """A version's files and links: content (or ``-> target``) by path."""
    manifest = await hands.versions.manifest(version)
    shown = {}
    for entry in manifest.entries:
        if entry.kind is EntryKind.FILE:
            shown[entry.path] = (await hands.versions.file(entry)).decode()
        elif entry.kind is EntryKind.LINK:
            shown[entry.path] = f"-> {entry.target}"
    return shown


async def test_a_call_sees_the_files_of_the_version_it_starts_from(hands: Hands) -> None:
    first = await run(hands, call("op-1", write={"pkg/a.py": "A = 1\n", "README": "hi"}))
    assert first.succeeded and first.version is not None
    assert first.version.files == 2 and first.version.base is None
    assert await files(hands, first.version) == {"README": "hi", "pkg/a.py": "A = 1\n"}
    second = await run(hands, call("op-2", first.version, read=["pkg/a.py"], delete=["README"]))
    assert second.output == {"read": {"pkg/a.py": "A = 1\n"}}
    assert second.version is not None and second.version.base == first.version.id
    assert await files(hands, second.version) == {"pkg/a.py": "A = 1\n"}
    # another Hands (an empty cache) materialises a call from the empty workspace
    other = hands.executor("hands-b", WorkspaceFlow(hands.versions, root=hands.root / "b"))
    again = await run(hands, call("op-3", read=[], write={"x": "1"}), other)
    assert again.version is not None and await files(hands, again.version) == {"x": "1"}


async def test_a_read_only_call_sees_the_files_and_produces_no_version(hands: Hands) -> None:
    first = await run(hands, call("op-1", write={"a.txt": "A"}))
    looked = await run(hands, call("op-2", first.version, tool="coder-ro", read=["a.txt"]))
    assert looked.succeeded and looked.output == {"read": {"a.txt": "A"}}
    assert looked.version is None


async def test_a_failing_exit_still_produces_a_version(hands: Hands) -> None:
    failed = await run(hands, call("op-1", write={"log.txt": "FAILED"}, exit=3))
    assert not failed.succeeded and failed.error is not None
    assert failed.error.code == "tool_failed"
    assert failed.version is not None
    assert await files(hands, failed.version) == {"log.txt": "FAILED"}


async def test_a_timeout_produces_no_version_and_the_tree_is_not_kept(hands: Hands) -> None:
    first = await run(hands, call("op-1", write={"a": "1"}))
    flow = hands.flow()
    slow = await run(
        hands,
        call("op-2", first.version, tool="slow", write={"a": "half"}, sleep=30),
        hands.executor(flow=flow),
    )
    assert slow.termination == "timeout" and slow.version is None
    assert not flow.layout.idle("s1").exists()  # its state is unknown: removed
    after = await run(hands, call("op-3", first.version, read=["a"]))
    assert after.output == {"read": {"a": "1"}}  # the last version's files, rebuilt


@pytest.mark.parametrize(
    ("hostile", "said", "needs_root"),
    [
        ("fifo", "'pipe' is a FIFO", False),
        ("socket", "'sock' is a socket", False),
        ("setuid", "'suid' has the setuid", False),
        ("device", "'null' is a character device", True),
    ],
)
async def test_a_tree_a_workspace_may_not_hold_is_refused(
    hands: Hands, hostile: str, said: str, needs_root: bool
) -> None:
    if needs_root and os.geteuid() != 0:
        pytest.skip("mknod of a device file needs root")
    result = await run(hands, call("op-1", write={"a": "1"}, hostile=hostile))
    assert not result.succeeded and result.error is not None
    assert result.error.code == "workspace_refused", result.error
    assert said in result.error.message
    assert result.version is None


async def test_a_link_pointing_outside_is_stored_as_a_link_and_never_followed(
    hands: Hands, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("the Hands' own file")
    first = await run(hands, call("op-1", link={"out": str(secret), "up": "../.."}))
    assert first.version is not None
    assert await files(hands, first.version) == {"out": f"-> {secret}", "up": "-> ../.."}
    # restored as links on another Hands (a full rebuild), their targets untouched
    other = hands.executor("hands-b", WorkspaceFlow(hands.versions, root=hands.root / "b"))
    second = await run(hands, call("op-2", first.version, read=["out", "up"]), other)
    assert second.output == {"read": {"out": str(secret), "up": "../.."}}
    assert secret.read_text() == "the Hands' own file"


async def test_past_the_limits_the_call_fails_with_workspace_too_large(hands: Hands) -> None:
    few = WorkspaceLimits(max_files=3)
    many = await run(hands, call("op-1", limits=few, write={f"f{i}": "x" for i in range(5)}))
    assert many.error is not None and many.error.code == "workspace_too_large"
    assert many.version is None
    small = WorkspaceLimits(max_bytes=10)
    big = await run(hands, call("op-2", limits=small, write={"big": "x" * 11}))
    assert big.error is not None and big.error.code == "workspace_too_large"


async def test_only_the_blobs_the_store_lacks_are_uploaded(hands: Hands) -> None:
    tree = {f"src/m{i}.py": f"N = {i}\n" for i in range(20)}
    first = await run(hands, call("op-1", write=tree))
    assert len(hands.versions.put) == 20
    hands.versions.put.clear()
    hands.versions.asked.clear()
    second = await run(hands, call("op-2", first.version, write={"src/m3.py": "N = 33\n"}))
    assert second.version is not None
    assert hands.versions.put == [len("N = 33\n")]
    assert [len(asked) for asked in hands.versions.asked] == [1]  # only the new content


async def test_artifacts_are_published_with_the_result(hands: Hands) -> None:
    result = await run(hands, call("op-1", publish={"report.txt": "2 passed"}))
    assert [a.name for a in result.artifacts] == ["report.txt"]
    assert result.artifacts[0].media_type == "text/plain"
    assert await hands.store.get_blob(result.artifacts[0].blob) == b"2 passed"
    hostile = await run(hands, call("op-2", publish={".hidden": "x"}))
    assert hostile.error is not None and hostile.error.code == "workspace_refused"


async def test_a_new_executor_concludes_a_run_whose_executor_died(hands: Hands) -> None:
    """The first executor materialised, started the run and died: the next one (another
    process on this Hands) finds the run's directories by its operation id."""
    d = call("op-1", write={"built": "yes"})
    dead = hands.executor("dead")
    record = await dead._record(d)
    definition = await hands.store.tools.get("coder-rw", 1)
    assert definition is not None
    await dead._intend(record, definition)
    claimed = (await dead._claim(record, definition, new_attempt=True)).record
    mount = await dead.workspaces.prepare(claimed)
    spec = RunSpec(
        operation_id="op-1", session_id="s1", tool=definition, args=d.args, workspace=mount
    )
    hands.sandbox._start(spec, hands.sandbox.root / "bh-op-1")  # started, never collected
    result = await run(hands, d, hands.executor("b"))
    assert result.executor == "b" and result.version is not None
    assert await files(hands, result.version) == {"built": "yes"}


def test_a_snapshot_hashes_only_the_files_that_changed(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache", max_bytes=2**30)
    entries = []
    for i in range(200):
        digest = cache.put(f"file {i}".encode())
        size = len(f"file {i}")
        entries.append(
            ManifestEntry(path=f"f{i:03}", kind=EntryKind.FILE, digest=digest, size=size)
        )
    manifest = Manifest(entries=tuple(entries))
    root = tmp_path / "tree" / "tree"
    root.mkdir(parents=True)

    def copy(digest: str, file: Any) -> None:
        assert cache.copy_into(digest, file)

    state = materialise(root, None, manifest, manifest.version_id(), copy, owner=None)
    (root / "f007").write_text("changed")
    found = scan(root, state, WorkspaceLimits(), cache)
    assert len(found.hashed) == 1
    assert {e.path: e.size for e in found.manifest.entries}["f007"] == len("changed")
    unchanged = [e for e in found.manifest.entries if e.path != "f007"]
    assert unchanged == [e for e in manifest.entries if e.path != "f007"]


def test_materialising_applies_only_the_difference(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache", max_bytes=2**30)

    def manifest_of(tree: dict[str, str]) -> Manifest:
        return Manifest(
            entries=tuple(
                ManifestEntry(
                    path=path, kind=EntryKind.FILE, digest=cache.put(text.encode()), size=len(text)
                )
                for path, text in sorted(tree.items())
            )
        )

    written: list[str] = []

    def copy(digest: str, file: Any) -> None:
        written.append(digest)
        assert cache.copy_into(digest, file)

    root = tmp_path / "tree" / "tree"
    root.mkdir(parents=True)
    old = manifest_of({f"f{i}": str(i) for i in range(50)})
    held = materialise(root, None, old, old.version_id(), copy, owner=None)
    assert len(written) == 50
    written.clear()
    new = manifest_of({**{f"f{i}": str(i) for i in range(1, 50)}, "f7": "seven", "g": "new"})
    untouched = (root / "f9").stat().st_ino
    materialise(root, held, new, new.version_id(), copy, owner=None)
    assert sorted(written) == sorted({cache.put(b"seven"), cache.put(b"new")})
    assert not (root / "f0").exists() and (root / "f7").read_text() == "seven"
    assert (root / "f9").stat().st_ino == untouched
    assert stat.S_IMODE((root / "g").stat().st_mode) == 0o644
    assert json.dumps(sorted(os.listdir(root))) == json.dumps(sorted(e.path for e in new.entries))


def test_the_hands_keep_trees_and_cache_where_the_setting_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:

    monkeypatch.setenv("BH_HANDS_WORKSPACE_CACHE", str(tmp_path / "ws"))
    monkeypatch.setenv("BH_HANDS_WORKSPACE_CACHE_SIZE", "64m")
    settings = HandsSettings.from_env(store_url="sqlite:///x.db")
    assert settings.workspace_root == tmp_path / "ws"
    assert settings.workspace_cache_bytes == 64 * 2**20


def test_a_tool_that_mounts_a_workspace_gets_no_warm_containers() -> None:
    """Mounts are fixed when a container is created, before its run's tree exists."""

    pool = WarmPool({"*": 2}, limit=4, memory_bytes=2**30, idle_s=60)
    plain = _coder("plain", WorkspaceMode.WRITE, 5).model_copy(
        update={"workspace": WorkspaceAccess()}
    )
    assert pool.size_for(plain) == 2
    assert pool.size_for(_coder("coder-rw", WorkspaceMode.WRITE, 5)) == 0
    assert pool.size_for(_coder("coder-ro", WorkspaceMode.READ, 5)) == 0


async def test_a_held_tree_is_reused_and_one_another_process_gave_back_is_read_again(
    hands: Hands,
) -> None:
    """A follow-up call on the same Hands rewrites nothing it holds already; a tree that
    another process (sharing the directory) gave back since is read from disk, never
    taken for the one this process remembers."""
    a, b = hands.executor("a", hands.flow()), hands.executor("b", hands.flow())
    first = await run(hands, call("op-1", write={"x": "1", "y": "2"}, inode=["x"]), a)
    second = await run(hands, call("op-2", first.version, inode=["x"], write={"y": "3"}), b)
    assert isinstance(first.output, dict) and isinstance(second.output, dict)
    assert second.output["inode"] == first.output["inode"]  # b read a's tree: not rewritten
    # a remembers the tree it gave back (the first version); b gave back the second since
    again = await run(hands, call("op-3", first.version, read=["y"], inode=["x"]), a)
    assert isinstance(again.output, dict) and again.output["read"] == {"y": "2"}
    assert again.output["inode"] == first.output["inode"]


def test_materialising_never_writes_through_a_link_or_outside_the_tree(tmp_path: Path) -> None:
    """A manifest that names a path under one of its own links (a stored version made
    by a hostile tool, or a damaged one) is refused; nothing is written outside."""

    outside = tmp_path / "outside"
    outside.mkdir()
    cache = BlobCache(tmp_path / "cache", max_bytes=2**20)
    digest = cache.put(b"owned")
    hostile = Manifest(
        entries=(
            ManifestEntry(path="a", kind=EntryKind.LINK, target=str(outside)),
            ManifestEntry(path="a/x", kind=EntryKind.FILE, digest=digest, size=5),
        )
    )
    root = tmp_path / "tree" / "tree"
    root.mkdir(parents=True)

    def copy(digest: str, file: Any) -> None:
        assert cache.copy_into(digest, file)

    with pytest.raises(WorkspaceRefused, match="not a directory inside the tree"):
        materialise(root, None, hostile, hostile.version_id(), copy, owner=None)
    assert list(outside.iterdir()) == []
    assert os.readlink(root / "a") == str(outside)  # the link itself, as a link
    for bad in ("../x", "a/../../x", "/etc/passwd", "a\x00b", "a//b", "./a"):
        with pytest.raises(WorkspaceRefused):
            checked(bad)
    for bad in ("../x", "a/../../x", "/etc/passwd", "a\x00b"):
        with pytest.raises(ValueError):
            ManifestEntry(path=bad, kind=EntryKind.DIR)


async def test_a_cancelled_run_produces_no_version_and_its_tree_is_not_kept(
    hands: Hands,
) -> None:
    first = await run(hands, call("op-1", write={"a": "1"}))
    flow = hands.flow()
    running = asyncio.create_task(
        hands.executor(flow=flow).handle(call("op-2", first.version, write={"a": "2"}, sleep=30))
    )

    async def started() -> bool:
        return (hands.sandbox.root / "bh-op-2" / "pid").exists()

    await assert_eventually(started, within=10)
    assert await hands.executor("api").cancel("op-2", "changed my mind") is None
    assert await asyncio.wait_for(running, 10) is None  # parked: no result, no version
    assert await hands.store.get_operation_result("op-2") is None
    assert not flow.layout.idle("s1").exists() and not flow.layout.run("op-2").root.exists()


def test_the_blob_cache_keeps_its_bound_evicting_the_least_recently_used(
    tmp_path: Path,
) -> None:
    cache = BlobCache(tmp_path / "cache", max_bytes=10)
    old, pinned = cache.put(b"aaaa"), cache.put(b"bbbb")
    with cache.pinned([pinned]):
        os.utime(cache._path(pinned), ns=(1, 1))  # the least recently used, but pinned
        newest = cache.put(b"cccc")
    assert cache.has(pinned) and cache.has(newest) and not cache.has(old)
    assert cache.size <= 10 and cache.read(newest) == b"cccc"


async def test_the_reaper_removes_run_directories_of_settled_operations_only(
    hands: Hands,
) -> None:
    """What a crash left: the directories of a run whose result another Hands wrote go;
    those of a run still unsettled stay (its reconnect needs them)."""
    flow = hands.flow()
    executor = hands.executor(flow=flow)
    await run(hands, call("op-1", write={"a": "1"}), executor)
    for op in ("op-1", "op-2"):
        flow.layout.fresh(op)
    touched = await executor.reconcile()
    assert "op-1" in touched
    assert not flow.layout.run("op-1").root.exists() and flow.layout.run("op-2").root.exists()


async def test_a_cache_too_small_to_keep_anything_still_materialises_and_uploads(
    hands: Hands,
) -> None:
    """Blobs evicted between the snapshot and the upload are read again from the run's
    tree (checked against their digest); blobs being copied into a tree stay pinned."""
    tiny = BlobCache(hands.root / "tiny", max_bytes=1)
    flow = WorkspaceFlow(hands.versions, root=hands.root, cache=tiny)
    first = await run(
        hands,
        call("op-1", write={"a": "alpha", "b/c": "gamma"}, publish={"r": "report"}),
        hands.executor(flow=flow),
    )
    assert first.version is not None and await files(hands, first.version) == {
        "a": "alpha",
        "b/c": "gamma",
    }
    assert await hands.store.get_blob(first.artifacts[0].blob) == b"report"
    other = WorkspaceFlow(
        hands.versions, root=hands.root / "other", cache=BlobCache(hands.root / "t2", max_bytes=1)
    )
    second = await run(
        hands, call("op-2", first.version, read=["a", "b/c"]), hands.executor("b", other)
    )
    assert second.output == {"read": {"a": "alpha", "b/c": "gamma"}}
    assert tiny.size <= 1


async def test_a_replay_starts_from_the_intent_s_base_again(hands: Hands, tmp_path: Path) -> None:
    """An attempt whose outcome is unknown (exit 75) left a half-written file; the replay
    of the replay-safe call starts from the base again and never sees it."""
    first = await run(hands, call("op-1", write={"a": "1"}))
    replayed = await run(
        hands, call("op-2", first.version, unknown_once=str(tmp_path / "once"), read=["a"])
    )
    assert replayed.path == "replayed" and replayed.succeeded, replayed
    assert replayed.output == {"read": {"a": "1", "partial seen": False}}
    assert replayed.version is not None and await files(hands, replayed.version) == {"a": "1"}
    assert first.version is not None and replayed.version.id == first.version.id  # same tree


class LosingVersions(CountingVersions):
    """A store where a collection deletes one blob between ``missing`` (which found it
    present) and ``put_version``: the first ``put_version`` refuses it as missing."""

    def __init__(self, store: SessionStore) -> None:
        super().__init__(store)
        self.lost: str | None = None

    async def missing(self, digests: Iterable[str]) -> set[str]:
        wanted = set(digests)
        if self.lost is not None and self.lost in wanted:
            return {self.lost}  # asked again after the refusal: the lost one is missing
        return await super().missing(wanted)

    async def put_version(
        self, manifest: Manifest, *, base: WorkspaceVersion | None
    ) -> WorkspaceVersion:
        if self.lost is None:
            self.lost = next(e.digest for e in manifest.entries if e.digest is not None)
            raise InvalidInput(
                "1 file(s) of the manifest are not in the store", missing=[self.lost]
            )
        return await super().put_version(manifest, base=base)


async def test_a_blob_lost_under_the_snapshot_is_uploaded_again_and_the_version_made(
    hands: Hands,
) -> None:
    versions = LosingVersions(hands.store)
    flow = WorkspaceFlow(versions, root=hands.root / "losing")
    done = await run(hands, call("op-1", write={"a.txt": "A"}), hands.executor(flow=flow))
    assert done.succeeded and done.version is not None, done
    assert versions.put == [1, 1]  # uploaded, then once more after the refusal
    assert await files(hands, done.version) == {"a.txt": "A"}
