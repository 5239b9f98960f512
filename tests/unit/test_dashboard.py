"""The Grafana dashboard (``infra/grafana/brainhands.json``) asks only for metrics the
services export, in PromQL that ``promtool`` parses; and every metric a service exports
is on it (or named here as deliberately left off)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from brain.metrics import BrainMetrics
from bus.backlog import Backlog
from coordination.backlog import RouteBacklog
from hands.metrics import HandsMetrics
from scheduler.metrics import SchedulerMetrics
from session_api.metrics import SessionApiMetrics
from tests.support.processes import ROOT
from tests.support.services import missing

DASHBOARD = ROOT / "infra" / "grafana" / "brainhands.json"
#: suffixes a query adds to a family's name (counters, histograms)
_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")
#: exported and deliberately not charted
OFF_THE_DASHBOARD = {
    "brainhands_hands_run_seconds",  # tool run times: per tool in the Hands API's views
    "brainhands_hands_queue_pending",  # the Hands' own view of the dispatch backlog
    "brainhands_hands_queue_ack_pending",
    "brainhands_hands_queue_oldest_age_seconds",
}


def exported() -> set[str]:
    """Every metric family name the services export (with data in the collectors that
    only report what they read)."""
    scheduler = SchedulerMetrics(
        SimpleNamespace(
            woken=Counter(),
            passes=0,
            reissued=0,
            duplicates=0,
            refusals=Counter,
            bus=None,
            collection=SimpleNamespace(collected=Counter()),
        )  # type: ignore[arg-type]
    )
    scheduler._backlog = scheduler._results = Backlog(0.0, 0.0, 0.0)
    session_api = SessionApiMetrics(None)
    session_api._last = [RouteBacklog(route="r", waiting=0, oldest_age_s=0.0, served=True)]
    registries = [
        BrainMetrics().registry,
        HandsMetrics().registry,
        scheduler.registry,
        session_api.registry,
    ]
    return {family.name for registry in registries for family in registry.collect()}


def expressions() -> list[str]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in document["panels"] for target in panel.get("targets", ())]


def family(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def test_every_query_names_an_exported_metric_and_every_metric_is_charted() -> None:
    known = exported()
    asked = {family(name) for expr in expressions() for name in re.findall(r"brainhands_\w+", expr)}
    assert asked - known == set()
    assert known - asked - OFF_THE_DASHBOARD == set()


def test_promtool_parses_every_query(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        missing("promtool is not installed (Debian's prometheus package; scripts/test installs it)")
    rules = [
        {"record": f"brainhands:dashboard_query_{n}", "expr": expr}
        for n, expr in enumerate(expressions())
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
