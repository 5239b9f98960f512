"""The plugins image: ``brainhands/service`` plus the user's own agent code, built offline.

``bh images build --plugin PATH`` builds, after ``brainhands/service:<version>``, an
image ``FROM`` it (recipe ``infra/images/plugins/Dockerfile``) that installs each PATH —
a directory with a ``pyproject.toml``: the user's package, e.g. with Brain plugins —
into the service venv ``/opt/brainhands``. Nothing inside ``docker build`` reaches an
index: each package's wheel is built on the host (``pip wheel --no-deps`` from a copy of
its sources), the service image's own pip resolves it offline against what the image
already holds (a dry run with its ``--report``), the host downloads only the
dependencies that are missing (for the image's python and platform, as the service
wheelhouse does), and the image installs from the build context with ``pip install
--no-index``. A package with no dependencies beyond the image's downloads nothing.

The image is labelled with the hash of what went in (the service image id, the plugin
sources, the recipe), tagged ``NAME:<version>`` and ``NAME:latest``, and skipped when
that hash is already built.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from bh.service_image import (
    CHECKOUT,
    SERVICE_BASE,
    _cache,
    _download,
    _inspect,
    _pip,
    _python_of,
    build_labelled,
    project,
    service_tag,
    wheel_platforms,
)
from contracts.errors import BrainhandsError, InvalidInput
from hands.images import BUILD_HASH_LABEL, BuiltImage, Say

PLUGINS_REPOSITORY: Final = "brainhands/service-plugins"
RECIPE: Final = CHECKOUT / "infra" / "images" / "plugins"
#: the service venv, made ``--without-pip`` (infra/images/service/Dockerfile)
VENV_PYTHON: Final = "/opt/brainhands/bin/python3"
#: not the package's sources: caches, VCS data, virtualenvs, and build output (which
#: ``pip wheel`` itself writes into a setuptools project)
SKIPPED_ANYWHERE: Final = frozenset(
    {"__pycache__", ".git", ".hg", ".venv", ".tox", ".nox"}
    | {".mypy_cache", ".pytest_cache", ".ruff_cache"}
)
SKIPPED_AT_TOP: Final = frozenset({"build", "dist", "venv"})
#: rounds of "the image's pip misses X, download X" before giving up
RESOLVE_ROUNDS: Final = 50


def plugin_sources(paths: Sequence[Path]) -> list[Path]:
    """The plugin directories, resolved and without repeats; refuses a path that is not a
    directory with a ``pyproject.toml``."""
    found: list[Path] = []
    for given in paths:
        path = given.expanduser().resolve()
        if not path.is_dir():
            raise InvalidInput(f"--plugin {given}: not a directory (want a Python package)")
        if not (path / "pyproject.toml").is_file():
            raise InvalidInput(f"--plugin {given}: no pyproject.toml in {path}")
        if path not in found:
            found.append(path)
    return found


def plugins_name(name: str) -> str:
    """The repository the plugins image is tagged in; refuses a name with a tag or digest
    (the tags are the version and ``latest``)."""
    last = name.rsplit("/", 1)[-1]
    if not name or not last or ":" in last or "@" in name or name != name.lower():
        raise InvalidInput(
            f"--service-image {name!r}: want a lower-case repository name without a tag "
            f"(e.g. {PLUGINS_REPOSITORY}); it is tagged :<version> and :latest"
        )
    return name


def source_files(source: Path) -> list[Path]:
    """The files of a plugin that go into its wheel and its hash, sorted."""
    found: list[Path] = []
    for directory, subdirectories, files in os.walk(source):
        here = Path(directory)
        subdirectories[:] = sorted(
            name
            for name in subdirectories
            if name not in SKIPPED_ANYWHERE
            and not name.endswith(".egg-info")
            and not (here == source and name in SKIPPED_AT_TOP)
        )
        found += [here / name for name in files if not name.endswith((".pyc", ".pyo"))]
    return sorted(found)


def plugins_hash(service_id: str, sources: Sequence[Path], recipe: Path = RECIPE) -> str:
    """What the image is made of: the service image, each plugin's files, the recipe."""
    digest = hashlib.sha256(f"service\0{service_id}\0".encode())
    digest.update(hashlib.sha256((recipe / "Dockerfile").read_bytes()).digest())
    for index, source in enumerate(sources):
        digest.update(f"plugin\0{index}\0".encode())
        for path in source_files(source):
            digest.update(f"{path.relative_to(source).as_posix()}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"sha256:{digest.hexdigest()}"


def assemble_context(root: Path, own: Sequence[Path], needed: Sequence[Path], pip: Path) -> None:
    """The build context: the recipe, the plugins' wheels in ``plugins/``, the missing
    dependencies' wheels and pip's in ``wheels/``."""
    shutil.copy(RECIPE / "Dockerfile", root / "Dockerfile")
    for folder, wheels in (("plugins", own), ("wheels", [*needed, pip])):
        (root / folder).mkdir(exist_ok=True)
        for wheel in wheels:
            shutil.copy(wheel, root / folder / wheel.name)


def reported_wheels(report: dict[str, Any], cache: Path, mount: str) -> list[Path]:
    """The cached dependency wheels a pip ``--report`` installs (the plugins' own wheels,
    found elsewhere, are not among them)."""
    found: list[Path] = []
    for item in report.get("install", []):
        url = str(item.get("download_info", {}).get("url", ""))
        prefix = f"file://{mount}/"
        if url.startswith(prefix):
            found.append(cache / url.removeprefix(prefix))
    return found


def plugins_tag(name: str = PLUGINS_REPOSITORY, version: str | None = None) -> str:
    return f"{name}:{version or project()['version']}"


async def build_plugin_image(
    sources: Sequence[Path],
    *,
    service: str | None = None,
    name: str = PLUGINS_REPOSITORY,
    docker_host: str | None = None,
    cache: Path | None = None,
    say: Say = print,
) -> BuiltImage:
    """Build (or find up to date) ``name:<version>`` and ``name:latest`` FROM ``service``
    (default ``brainhands/service:<version>``, which must exist) with ``sources``
    installed; ``sources`` as ``plugin_sources`` returns them."""
    import docker  # type: ignore[import-untyped]

    service = service or service_tag()
    tag = plugins_tag(name)
    client = await asyncio.to_thread(
        docker.DockerClient, base_url=docker_host or os.environ.get("DOCKER_HOST") or None
    )
    try:
        base = await asyncio.to_thread(_inspect, client, service)
        if base is None:
            raise BrainhandsError(f"{service} is missing: build it with --services first")
        wanted = plugins_hash(base.id, sources)
        found = await asyncio.to_thread(_inspect, client, tag)
        if found is not None and found.labels.get(BUILD_HASH_LABEL) == wanted:
            say(f"{tag}: up to date")
            return BuiltImage(tag, found.id, skipped=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="bh-plugins-") as context:
            plan = _Plan(client, service, Path(context), cache or _cache(), say)
            await asyncio.to_thread(plan.assemble, sources)
            say(f"{tag}: building from {RECIPE} (FROM {service})")
            base = {"SERVICE": service}
            image = await asyncio.to_thread(build_labelled, client, plan.root, tag, wanted, base)
        say(f"{tag}: built in {time.monotonic() - started:.1f} s ({image.id})")
        return BuiltImage(tag, image.id, skipped=False)
    finally:
        await asyncio.to_thread(client.close)


class _Plan:
    """Assembling one build context: wheels built, resolved in the image, downloaded."""

    def __init__(self, client: Any, service: str, root: Path, cache: Path, say: Say) -> None:
        self.client, self.service, self.root, self.say = client, service, root, say
        self.cache = cache
        self._python: str | None = None

    @property
    def python(self) -> str:
        """The image's python version (the service image's is its base's)."""
        if self._python is None:
            self._python = _python_of(self.client, SERVICE_BASE)
        return self._python

    def assemble(self, sources: Sequence[Path]) -> None:
        own = self.root / "own"
        own.mkdir()
        for index, source in enumerate(sources):
            self.say(f"plugins: building the wheel of {source}")
            _wheel(source, own, self.root / "sources" / str(index))
        pip = self._pip_wheel()
        needed = self._resolve(own, pip)
        assemble_context(self.root, sorted(own.glob("*.whl")), needed, pip)
        shutil.rmtree(own)

    def _pip_wheel(self) -> Path:
        """pip's wheel for the image (its venv has none): the service wheelhouse's, else
        one downloaded beside the plugins' dependencies."""
        candidates = list(self.cache.glob("*/pip-*.whl"))
        if not candidates:
            candidates = list(self._downloads().glob("pip-*.whl"))
        if not candidates:
            self.say("plugins: downloading pip's wheel for the image")
            _download(self._downloads(), self.python, ["pip"])
            candidates = list(self._downloads().glob("pip-*.whl"))
        return sorted(candidates, key=lambda path: path.name)[-1]

    def _downloads(self) -> Path:
        """Dependency wheels for the image's python, shared by every plugins build."""
        key = hashlib.sha256("\n".join([self.python, *wheel_platforms()]).encode())
        folder = self._downloads_root() / key.hexdigest()[:16]
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _downloads_root(self) -> Path:
        return self.cache.parent / "plugin-wheels"

    def _resolve(self, own: Path, pip: Path) -> list[Path]:
        """The dependency wheels the image lacks: its pip resolves offline against what it
        holds; each distribution it misses is downloaded and the resolution repeated."""
        # what earlier builds downloaded counts from the start: a second build of the same
        # dependencies downloads nothing
        downloads = self._downloads() if self._downloads_root().exists() else None
        for _ in range(RESOLVE_ROUNDS):
            missing, report = _dry_run(self.client, self.service, own, downloads, pip)
            if not missing:
                return reported_wheels(report, downloads, "/deps") if downloads else []
            downloads = self._downloads()
            self.say(f"plugins: the image also needs {', '.join(missing)}; downloading")
            _download(downloads, self.python, missing)
        raise BrainhandsError(f"the plugins' dependencies stay unresolved: {missing}")


def _wheel(source: Path, into: Path, copy: Path) -> None:
    """``pip wheel --no-deps`` of a copy of ``source`` (so the build litters nothing in
    the user's directory and builds exactly the hashed files)."""
    for path in source_files(source):
        target = copy / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    try:
        _pip("wheel", "--no-deps", "--wheel-dir", str(into), str(copy))
    except BrainhandsError as error:
        raise InvalidInput(
            f"--plugin {source}: its wheel does not build ({_last_error(error.message)}); "
            f"see `pip wheel --no-deps {source}`"
        ) from None


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"(?i)^(error|[a-z]*error)\b", line)]
    return (errors or lines or ["no output"])[-1][:300]


def _conflict(text: str) -> str:
    """pip's reason, not its pointer to the docs."""
    reasons = [
        line.strip()
        for line in text.splitlines()
        if line.startswith("ERROR:") and "ResolutionImpossible" not in line
    ]
    return reasons[0][:300] if reasons else _last_error(text)


def _dry_run(
    client: Any, service: str, own: Path, downloads: Path | None, pip: Path
) -> tuple[list[str], dict[str, Any]]:
    """The image's pip installing the plugins' wheels, offline, as a dry run: what it
    misses, else its report of what it would install."""
    import docker

    volumes = {
        str(own): {"bind": "/own", "mode": "ro"},
        str(pip): {"bind": f"/pip/{pip.name}", "mode": "ro"},
    }
    links = ["--find-links", "/own"]
    if downloads is not None:
        volumes[str(downloads)] = {"bind": "/deps", "mode": "ro"}
        links += ["--find-links", "/deps"]
    wheels = [f"/own/{wheel.name}" for wheel in sorted(own.glob("*.whl"))]
    command = [
        f"/pip/{pip.name}/pip", "install", "--dry-run", "--quiet", "--no-index",
        "--no-cache-dir", "--disable-pip-version-check", *links, "--report", "-",
        # named so that the resolver holds the service's own pins (see the recipe)
        *wheels, "brainhands",
    ]  # fmt: skip
    try:
        output = client.containers.run(
            service,
            command,
            entrypoint=VENV_PYTHON,
            volumes=volumes,
            network_disabled=True,
            remove=True,
            stderr=False,
        )
    except docker.errors.ContainerError as error:
        text = (error.stderr or b"").decode(errors="replace")
        found = re.findall(r"No matching distribution found for (\S+)", text)
        if not found:
            raise InvalidInput(
                f"the plugins do not install in {service}: {_conflict(text)}",
                log_tail=text[-2000:],
            ) from None
        return found, {}
    return [], dict(json.loads(output.decode()))
