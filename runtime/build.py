"""Which build of brainhands this process runs: its **build id**.

``BH_BUILD_ID`` when set — the service image sets it to ``<version>+<the first 12 hex
digits of the image's build hash>``, so two images of one version built from different
sources differ — else the installed package's version. Every service says it on
``/livez`` and ``/readyz``, and every commit a process writes names it (the store's
``writer``: ``host:pid@build``), so an operator can tell which build drove each step of
a session during and after a rolling upgrade (``docs/deploy.md``).
"""

from __future__ import annotations

import os
from functools import cache
from importlib.metadata import PackageNotFoundError, version

ENV = "BH_BUILD_ID"


@cache
def package_version() -> str:
    try:
        return version("brainhands")
    except PackageNotFoundError:
        return "0+unknown"


def build_id() -> str:
    """This process's build id (``BH_BUILD_ID``, else the package version)."""
    return os.environ.get(ENV, "").strip() or package_version()


def image_build_id(build_hash: str) -> str:
    """The build id of a service image with the build hash ``build_hash``."""
    digest = build_hash.removeprefix("sha256:")[:12]
    return f"{package_version()}+{digest}"
