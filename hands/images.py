"""Building the tool images offline: the Debian base and one image per tool directory.

``sandbox-images/base/build`` makes ``brainhands/base:bookworm`` with debootstrap (no
registry needed); every ``sandbox-images/tools/<dir>/`` becomes
``brainhands/tool-<dir>:latest`` ``FROM`` that base (or another one, ``base=``, e.g.
``python:3.12-slim`` in production). Each image carries the hash of its recipe in the
label ``io.brainhands.build-hash`` — the base script's content; a tool directory's files
together with its base image id — and is built only when no image with that tag and
hash exists, so building again is a few inspections. A tool image also carries the
digest of its directory's files alone (``RECIPE_LABEL``, ``io.brainhands.recipe``): the
same on every base, it tells the registry that a rebuilt image runs the same code.

Images are only added, never removed: a registered tool pins an image by id, and a
rebuild must not take that image away.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import docker  # type: ignore[import-untyped]
import requests

from contracts.errors import BrainhandsError, InvalidInput, NotFound
from contracts.tool import BUILD_HASH_LABEL as BUILD_HASH_LABEL  # re-exported
from contracts.tool import LABEL_PREFIX, RECIPE_LABEL

BASE_IMAGE: Final = "brainhands/base:bookworm"
SANDBOX_IMAGES: Final = Path(__file__).resolve().parents[1] / "sandbox-images"
TOOL_REPOSITORY: Final = "brainhands/tool-"

Say = Callable[[str], None]


def _silent(message: str) -> None:
    pass


@dataclass(frozen=True)
class BuiltImage:
    """One image a build produced or found; ``skipped``: it was already up to date."""

    tag: str
    image_id: str
    skipped: bool


@dataclass(frozen=True)
class ImageSummary:
    """A brainhands image on the engine, for listings; ``tool`` is ``name@version``."""

    tag: str
    image_id: str
    size: int
    tool: str | None


def tool_tag(directory: str) -> str:
    """The tag of the image built from ``sandbox-images/tools/<directory>``."""
    return f"{TOOL_REPOSITORY}{directory}:latest"


def tool_directories(root: Path = SANDBOX_IMAGES) -> dict[str, Path]:
    """The tool recipes under ``root/tools``, by directory name (each has a Dockerfile)."""
    tools = root / "tools"
    found = sorted(path.parent for path in tools.glob("*/Dockerfile"))
    return {path.name: path for path in found}


def build_hash(directory: Path, *, base_id: str) -> str:
    """The recipe hash of a tool image: its directory's files and its base image id."""
    return _files_digest(directory, f"base\0{base_id}\0".encode())


def recipe_digest(directory: Path) -> str:
    """The digest of a tool directory's files alone (``RECIPE_LABEL``): one per recipe,
    whatever base its image is built on."""
    return _files_digest(directory, b"recipe\0")


def base_hash(root: Path = SANDBOX_IMAGES, *, packages: Sequence[str] = ()) -> str:
    """The recipe hash of a base image (what the base script labels it with): the script,
    and the extra packages when there are any."""
    recipe = _base_script(root).read_bytes()
    if packages:
        recipe += b"\0" + ",".join(packages).encode()
    return f"sha256:{hashlib.sha256(recipe).hexdigest()}"


async def build_base(
    docker_host: str | None = None,
    *,
    tag: str = BASE_IMAGE,
    packages: Sequence[str] = (),
    root: Path = SANDBOX_IMAGES,
    say: Say = _silent,
) -> BuiltImage:
    """The debootstrap base ``tag`` with python3 and ``packages``, built when missing or
    out of date (the service image's base adds iptables for the Hands' firewall)."""
    async with _engine(docker_host) as client:
        return await _default_base(client, root, docker_host, say, tag=tag, packages=packages)


async def build_images(
    docker_host: str | None = None,
    *,
    names: Sequence[str] | None = None,
    base: str | None = None,
    root: Path = SANDBOX_IMAGES,
    say: Say = _silent,
) -> dict[str, BuiltImage]:
    """Build the base (when ``base`` is None) and the tool images ``names`` (directory or
    tool names; all when None), skipping what is up to date. Tag → image, base first.

    ``docker_host`` is the engine's URL (None: ``DOCKER_HOST`` or the default socket).
    """
    directories = _select(tool_directories(root), names)
    async with _engine(docker_host) as client:
        if base is None:
            base_image = await _default_base(client, root, docker_host, say)
        else:
            base_image = await _given_base(client, base, say)
        built = {base_image.tag: base_image}
        for name, directory in directories.items():
            image = await _tool(client, tool_tag(name), directory, base_image, say)
            built[image.tag] = image
    return built


async def list_images(docker_host: str | None = None) -> list[ImageSummary]:
    """Images tagged ``brainhands/…`` or declaring a tool, one row per tag."""
    async with _engine(docker_host) as client:
        images = await _call(client.images.list, what="listing images")
    rows = []
    for image in images:
        labels: Mapping[str, str] = image.labels or {}
        name = labels.get(LABEL_PREFIX + "name")
        tool = f"{name}@{labels.get(LABEL_PREFIX + 'version', '?')}" if name else None
        for tag in image.tags:
            if tag.startswith("brainhands/") or tool:
                rows.append(ImageSummary(tag, image.id, int(image.attrs.get("Size", 0)), tool))
    return sorted(rows, key=lambda row: row.tag)


def _select(directories: dict[str, Path], names: Sequence[str] | None) -> dict[str, Path]:
    if names is None:
        return directories
    wanted = {name.replace("_", "-") for name in names}
    unknown = sorted(wanted - directories.keys())
    if unknown:
        raise NotFound(
            f"no tool recipe named {', '.join(unknown)}; known: {', '.join(directories)}",
            unknown=unknown,
        )
    return {name: path for name, path in directories.items() if name in wanted}


async def _default_base(
    client: Any,
    root: Path,
    docker_host: str | None,
    say: Say,
    *,
    tag: str = BASE_IMAGE,
    packages: Sequence[str] = (),
) -> BuiltImage:
    wanted = base_hash(root, packages=packages)
    found = await _inspect(client, tag)
    if found is not None and found.labels.get(BUILD_HASH_LABEL) == wanted:
        say(f"{tag}: up to date")
        return BuiltImage(tag, found.id, skipped=True)
    say(f"{tag}: building with {_base_script(root)} (debootstrap, about a minute)")
    started = time.monotonic()
    await _run_base_script(_base_script(root), docker_host, say, tag=tag, packages=packages)
    built = await _inspect(client, tag)
    if built is None or built.labels.get(BUILD_HASH_LABEL) != wanted:
        raise BrainhandsError(f"the base script finished but {tag} is not up to date")
    say(f"{tag}: built in {time.monotonic() - started:.1f} s ({built.id})")
    return BuiltImage(tag, built.id, skipped=False)


async def _given_base(client: Any, base: str, say: Say) -> BuiltImage:
    found = await _inspect(client, base)
    if found is None:
        say(f"{base}: not here, pulling")
        try:
            found = await _call(client.images.pull, base, what=f"pulling {base}")
        except BrainhandsError as error:
            raise NotFound(
                f"base image {base} is not on this engine and could not be pulled: {error.message}",
                image=base,
            ) from None
    say(f"{base}: base image ({found.id})")
    return BuiltImage(base, found.id, skipped=True)


async def _tool(client: Any, tag: str, directory: Path, base: BuiltImage, say: Say) -> BuiltImage:
    wanted = {
        BUILD_HASH_LABEL: build_hash(directory, base_id=base.image_id),
        RECIPE_LABEL: recipe_digest(directory),
    }
    found = await _inspect(client, tag)
    # an image built before it was labelled with its recipe is built once more
    if found is not None and all(found.labels.get(k) == v for k, v in wanted.items()):
        say(f"{tag}: up to date")
        return BuiltImage(tag, found.id, skipped=True)
    started = time.monotonic()
    image, _log = await _call(
        client.images.build,
        path=str(directory),
        tag=tag,
        buildargs={"BASE": base.tag},
        labels=wanted,
        rm=True,
        forcerm=True,
        pull=False,
        what=f"building {tag} from {directory}",
    )
    say(f"{tag}: built in {time.monotonic() - started:.1f} s ({image.id})")
    return BuiltImage(tag, image.id, skipped=False)


async def _run_base_script(
    script: Path, docker_host: str | None, say: Say, *, tag: str, packages: Sequence[str]
) -> None:
    env = dict(os.environ)
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    env["BH_BASE_PACKAGES"] = ",".join(packages)
    process = await asyncio.create_subprocess_exec(
        "bash",
        str(script),
        tag,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    _, errors = await asyncio.gather(_forward(process.stdout, say), process.stderr.read())
    if await process.wait() != 0:
        tail = errors.decode(errors="replace").strip()[-2000:]
        raise BrainhandsError(
            f"building {tag} failed (exit {process.returncode}): {tail}", script=str(script)
        )


async def _forward(stream: asyncio.StreamReader, say: Say) -> None:
    async for line in stream:
        say(line.decode(errors="replace").rstrip())


async def _inspect(client: Any, tag: str) -> Any:
    """The image with this tag, or None."""
    try:
        return await _call(client.images.get, tag, what=f"inspecting {tag}")
    except NotFound:
        return None


@asynccontextmanager
async def _engine(docker_host: str | None) -> AsyncIterator[Any]:
    """A ``docker.DockerClient`` on the engine, closed afterwards."""
    where = docker_host or os.environ.get("DOCKER_HOST") or "the default socket"
    with _translated(f"connecting to the Docker engine at {where}"):
        if docker_host:
            client = await asyncio.to_thread(docker.DockerClient, base_url=docker_host)
        else:
            client = await asyncio.to_thread(docker.from_env)
    try:
        yield client
    finally:
        await asyncio.to_thread(client.close)


async def _call(function: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> Any:
    """Run a blocking docker SDK call in a thread, its errors translated."""
    with _translated(what):
        return await asyncio.to_thread(function, *args, **kwargs)


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """docker SDK errors as the project's errors, saying what was being done."""
    try:
        yield
    except docker.errors.ImageNotFound as error:
        raise NotFound(f"{what}: {_explain(error)}") from None
    except docker.errors.BuildError as error:
        log = "".join(
            str(chunk.get("stream") or chunk.get("error") or "") for chunk in error.build_log
        )
        raise InvalidInput(f"{what}: {error.msg}", log_tail=log[-2000:]) from None
    except (docker.errors.DockerException, requests.RequestException) as error:
        raise BrainhandsError(f"{what}: {_explain(error)}") from None


def _explain(error: BaseException) -> str:
    explanation = getattr(error, "explanation", None)
    return str(explanation or error) or type(error).__name__


def _base_script(root: Path) -> Path:
    return root / "base" / "build"


def _files_digest(directory: Path, prefix: bytes) -> str:
    digest = hashlib.sha256(prefix)
    for path in sorted(_recipe_files(directory)):
        digest.update(f"{path.relative_to(directory).as_posix()}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"sha256:{digest.hexdigest()}"


def _recipe_files(directory: Path) -> Iterator[Path]:
    for path in directory.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path
