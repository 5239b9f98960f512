"""What starting a process costs (issue 17): the CPU time of importing each service's
entry point, against a bare interpreter in the same run.

Every restart pays it: a Brain or Hands replaced after a crash, a scaled-out worker, each
``bh`` command, and each of the hundreds of processes the crash tests start and kill.
Each figure is the median over ``--repeats`` fresh interpreters of their user + system
CPU time (``RUSAGE_CHILDREN``), and its ratio to ``python -c pass``::

    python -m bench.startup --repeats 7 --out bench/results/startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.stats import median

#: what each process imports before it does anything (``python -m X``)
ENTRY_POINTS = (
    "brain.__main__",
    "hands.__main__",
    "scheduler.__main__",
    "session_api.server",
    "hands.api_server",
    "bh.cli",
)


def cpu_seconds(code: str) -> float:
    """The user + system CPU time of one fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="bench/results/startup.json")
    args = parser.parse_args()
    codes = {"python -c pass": "pass"} | {name: f"import {name}" for name in ENTRY_POINTS}
    for code in codes.values():  # warm the page cache and the bytecode caches
        cpu_seconds(code)
    samples: dict[str, list[float]] = {name: [] for name in codes}
    for _ in range(args.repeats):  # interleaved, so drift hits every entry alike
        for name, code in codes.items():
            samples[name].append(cpu_seconds(code))
    floor = median(samples["python -c pass"])
    report: dict[str, Any] = {"repeats": args.repeats, "load": os.getloadavg(), "entries": {}}
    print(f"{'process':24} {'CPU ms':>8} {'÷ bare':>7}")
    for name, values in samples.items():
        cpu = median(values)
        report["entries"][name] = {"cpu_ms": round(cpu * 1000, 1), "ratio": round(cpu / floor, 2)}
        print(f"{name:24} {cpu * 1000:8.1f} {cpu / floor:7.2f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
