"""The ``brainhands/service`` image, built offline: one image runs every role.

Recipe: ``infra/images/service/Dockerfile``, ``FROM`` ``SERVICE_BASE``: the debootstrap
base of the tool images (``hands.images.build_base``) with iptables added. The build
context holds a wheelhouse and nothing else: the project's pinned dependencies as binary
wheels for the base's CPython 3.11 on this machine's architecture (``pip download``, kept
in a cache keyed by the dependency list, so a second build downloads nothing), pip's own
wheel, and a wheel of this checkout
(``pip wheel --no-deps``). In the image ``pip install --no-index`` installs from it: no
registry and no index are reached from inside the build.

The image is labelled with the hash of what went in (the checkout's sources, the
dependency list, the recipe, the base image id) and tagged ``:<version>`` and
``:latest``; a build whose hash is already there is skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any, Final

from contracts.errors import BrainhandsError
from hands.images import BUILD_HASH_LABEL, BuiltImage, Say, build_base
from runtime.build import image_build_id

SERVICE_REPOSITORY: Final = "brainhands/service"
#: the tool images' debootstrap base plus what the Hands run besides Python: iptables
#: (their egress firewall, in the engine's network namespace)
SERVICE_BASE: Final = "brainhands/service-base:bookworm"
SERVICE_BASE_PACKAGES: Final = ("iptables",)
CHECKOUT: Final = Path(__file__).resolve().parents[1]
RECIPE: Final = CHECKOUT / "infra" / "images" / "service"


def service_tag(version: str | None = None) -> str:
    return f"{SERVICE_REPOSITORY}:{version or project()['version']}"


def project(checkout: Path = CHECKOUT) -> dict[str, Any]:
    """``[project]`` of the checkout's pyproject.toml."""
    document = tomllib.loads((checkout / "pyproject.toml").read_text())
    return dict(document["project"])


def wheel_platforms(machine: str | None = None) -> list[str]:
    """The platform tags a bookworm base (glibc 2.36) runs, newest first."""
    arch = machine or platform.machine()
    return [f"manylinux_2_28_{arch}", f"manylinux_2_17_{arch}", f"manylinux2014_{arch}"]


def service_hash(base_id: str, checkout: Path = CHECKOUT) -> str:
    """What the image is made of: sources, dependency pins, recipe, base."""
    digest = hashlib.sha256(f"base\0{base_id}\0".encode())
    for path in sorted(_inputs(checkout)):
        digest.update(f"{path.relative_to(checkout).as_posix()}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"sha256:{digest.hexdigest()}"


async def build_service_image(
    docker_host: str | None = None, *, cache: Path | None = None, say: Say = print
) -> BuiltImage:
    """Build (or find up to date) ``brainhands/service:<version>`` and ``:latest``."""
    import docker  # type: ignore[import-untyped]

    base = await build_base(docker_host, tag=SERVICE_BASE, packages=SERVICE_BASE_PACKAGES, say=say)
    wanted = service_hash(base.image_id)
    tag = service_tag()
    client = await asyncio.to_thread(
        docker.DockerClient, base_url=docker_host or os.environ.get("DOCKER_HOST") or None
    )
    try:
        found = await asyncio.to_thread(_inspect, client, tag)
        if found is not None and found.labels.get(BUILD_HASH_LABEL) == wanted:
            say(f"{tag}: up to date")
            return BuiltImage(tag, found.id, skipped=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="bh-service-") as context:
            root = Path(context)
            shutil.copy(RECIPE / "Dockerfile", root / "Dockerfile")
            python = await asyncio.to_thread(_python_of, client, SERVICE_BASE)
            wheels, cached = root / "wheels", cache or _cache()
            await asyncio.to_thread(_wheelhouse, wheels, python, cached, client, say)
            say(f"{tag}: building from {RECIPE} (FROM {SERVICE_BASE})")
            args = {"BASE": SERVICE_BASE}
            image = await asyncio.to_thread(build_labelled, client, root, tag, wanted, args)
        say(f"{tag}: built in {time.monotonic() - started:.1f} s ({image.id})")
        return BuiltImage(tag, image.id, skipped=False)
    finally:
        await asyncio.to_thread(client.close)


def _inputs(checkout: Path) -> list[Path]:
    """What the image's wheel is made of: the packages setuptools finds (its ``include``
    less its ``exclude``: ``examples/own-agent`` is a project of its own, and editing it
    must not rebuild the service image)."""
    found = [checkout / "pyproject.toml", checkout / "README.md", RECIPE / "Dockerfile"]
    included, excluded = _packages(checkout)
    for package in included:
        found += [
            path
            for path in (checkout / package).rglob("*")
            if path.is_file()
            and "__pycache__" not in path.parts
            and path.suffix != ".pyc"
            and not any(path.is_relative_to(checkout / folder) for folder in excluded)
        ]
    return found


def _packages(checkout: Path) -> tuple[list[str], list[str]]:
    """The folders of setuptools' ``include`` and of its ``exclude`` patterns."""
    document = tomllib.loads((checkout / "pyproject.toml").read_text())
    find = document["tool"]["setuptools"]["packages"]["find"]

    def folders(key: str) -> list[str]:
        return sorted({p.rstrip("*").rstrip(".").replace(".", "/") for p in find.get(key, [])})

    return folders("include"), folders("exclude")


def _cache() -> Path:
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return home / "brainhands" / "wheelhouse"


def _python_of(client: Any, image: str) -> str:
    """The full version of the image's python3: dependency markers compare it
    (``python_full_version < "3.11.3"`` needs a wheel that 3.11.8 does not)."""
    output = client.containers.run(
        image,
        ["python3", "-c", "import platform; print(platform.python_version())"],
        remove=True,
        network_disabled=True,
    )
    return str(output.decode().strip())


def _wheelhouse(into: Path, python: str, cache: Path, client: Any, say: Say) -> None:
    """The dependencies' wheels for ``python`` (cached by their pins), pip's, and this
    checkout's."""
    pins = sorted(project()["dependencies"])
    key = hashlib.sha256("\n".join([python, *wheel_platforms(), *pins]).encode())
    cached = cache / key.hexdigest()[:16]
    into.mkdir(parents=True)
    say("wheelhouse: building this checkout's wheel")
    _pip("wheel", "--no-deps", "--wheel-dir", str(into), str(CHECKOUT))
    if not (cached / ".complete").exists():
        say(f"wheelhouse: downloading {len(pins)} pinned dependencies and pip into {cached}")
        cached.mkdir(parents=True, exist_ok=True)
        _download(cached, python, [*pins, "pip"])
        _complete(client, cached, into, python, say)
        (cached / ".complete").touch()
    for wheel in cached.glob("*.whl"):
        shutil.copy(wheel, into / wheel.name)


def _download(into: Path, python: str, requirements: list[str]) -> None:
    platforms = [flag for tag in wheel_platforms() for flag in ("--platform", tag)]
    _pip(
        "download", "--dest", str(into), "--only-binary", ":all:",
        "--python-version", python, "--implementation", "cp", *platforms, *requirements,
    )  # fmt: skip


def _complete(client: Any, cached: Path, checkout_wheel: Path, python: str, say: Say) -> None:
    """Let the base's own pip resolve against the wheelhouse (offline, a dry run) and
    fetch what it misses: pip on this host evaluates markers such as
    ``python_full_version < "3.11.3"`` with this host's interpreter, not the base's."""
    for _ in range(5):
        missing = _missing(client, cached, checkout_wheel)
        if not missing:
            return
        say(f"wheelhouse: the base's python also needs {', '.join(missing)}")
        _download(cached, python, missing)
    raise BrainhandsError(f"the wheelhouse in {cached} stays incomplete: {missing}")


def _missing(client: Any, cached: Path, checkout_wheel: Path) -> list[str]:
    import docker

    pip = sorted(cached.glob("pip-*.whl"))[-1].name
    command = [
        "python3", f"/cache/{pip}/pip", "install", "--dry-run", "--quiet", "--no-index",
        "--break-system-packages", "--find-links", "/cache", "--find-links", "/own",
        "brainhands",
    ]  # fmt: skip
    try:
        client.containers.run(
            SERVICE_BASE,
            command,
            volumes={
                str(cached): {"bind": "/cache", "mode": "ro"},
                str(checkout_wheel): {"bind": "/own", "mode": "ro"},
            },
            network_disabled=True,
            remove=True,
            stderr=True,
        )
    except docker.errors.ContainerError as error:
        text = (error.stderr or b"").decode(errors="replace")
        found = re.findall(r"No matching distribution found for (\S+)", text)
        if not found:
            raise BrainhandsError(f"resolving the wheelhouse failed: {text[-2000:]}") from None
        return found
    return []


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BrainhandsError(f"pip {args[0]} failed: {done.stderr.strip()[-2000:]}")


def _inspect(client: Any, tag: str) -> Any:
    import docker

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def build_labelled(client: Any, context: Path, tag: str, wanted: str, base: dict[str, str]) -> Any:
    """Build ``context`` as ``tag`` (and ``<repository>:latest``) labelled with its build
    hash ``wanted``; ``base``: the recipe's build arguments naming what it is FROM. A
    failed build is one error with the build log's tail."""
    import docker

    try:
        image, _ = client.images.build(
            path=str(context),
            tag=tag,
            buildargs={**base, "BUILD_ID": image_build_id(wanted)},
            labels={
                BUILD_HASH_LABEL: wanted,
                "org.opencontainers.image.version": tag.rsplit(":", 1)[-1],
            },
            rm=True,
            forcerm=True,
            pull=False,
        )
    except docker.errors.BuildError as error:
        log = "".join(
            str(chunk.get("stream") or chunk.get("error") or "") for chunk in error.build_log
        )
        raise BrainhandsError(f"building {tag} failed: {error.msg}", log_tail=log[-2000:]) from None
    image.tag(tag.rsplit(":", 1)[0], "latest")
    return image
