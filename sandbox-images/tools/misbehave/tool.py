"""misbehave: a tool that attacks its own sandbox, for hardening tests.

Each ``action`` tries one thing a hostile or broken tool might do and reports what it
managed; the tests assert that the sandbox held (limits hit, writes refused, no
capabilities, no network). Actions that cannot report (``hog_memory``, ``ignore_term``)
are expected to be ended by the executor. Every loop has a cap, so even an unconfined
run ends on its own. Stdlib only; see docs/tools.md.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

MiB = 2**20
FORK_CAP = 1024
MEMORY_CAP = 4096 * MiB
DISK_CAP = 1024 * MiB
STATUS_FIELDS = ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb", "NoNewPrivs", "Seccomp")


def fork_bomb(args: dict[str, Any]) -> Any:
    children: list[int] = []
    error = None
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        while len(children) < FORK_CAP:
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            children.append(pid)
    except OSError as failure:
        error = _describe(failure)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return {"forked": len(children), "error": error}


def hog_memory(args: dict[str, Any]) -> Any:
    hoard: list[bytes] = []
    try:
        while len(hoard) * 8 * MiB < MEMORY_CAP:
            hoard.append(b"\x01" * (8 * MiB))  # filled, so every page is really touched
            print(f"misbehave: holding {len(hoard) * 8} MiB", file=sys.stderr, flush=True)
    except MemoryError as failure:
        return {"allocated_bytes": len(hoard) * 8 * MiB, "error": _describe(failure)}
    return {"allocated_bytes": len(hoard) * 8 * MiB, "error": None}


def fill_disk(args: dict[str, Any]) -> Any:
    written, error, chunk = 0, None, b"\0" * MiB
    try:
        with open("/tmp/fill", "wb", buffering=0) as file:
            while written < DISK_CAP:
                written += file.write(chunk) or 0
    except OSError as failure:
        error = _describe(failure)
    return {"written_bytes": written, "error": error}


def flood_output(args: dict[str, Any]) -> Any:
    remaining = int(args.get("bytes", 10 * MiB))
    block = b"x" * (64 * 1024)
    try:
        while remaining > 0:
            remaining -= sys.stdout.buffer.write(block[:remaining])
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        print("misbehave: stdout was closed", file=sys.stderr, flush=True)
        # Nothing more can be said on stdout; keep the exit-time flush from failing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return None


def write_root(args: dict[str, Any]) -> Any:
    report: dict[str, dict[str, Any]] = {}
    for path in ("/opt/bh/owned", "/etc/owned", "/owned", "/tmp/owned"):
        try:
            with open(path, "x") as file:
                file.write("owned\n")
            report[path] = {"created": True, "error": None}
        except OSError as failure:
            report[path] = {"created": False, "error": _describe(failure)}
    return {"paths": report}


def whoami(args: dict[str, Any]) -> Any:
    report: dict[str, Any] = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}
    with open("/proc/self/status") as file:
        for line in file:
            key, _, value = line.partition(":")
            if key in STATUS_FIELDS:
                report[key] = value.strip()
    report["docker_socket"] = os.path.exists("/var/run/docker.sock")
    report["environment"] = sorted(os.environ)  # names only: values may be config
    return report


def connect(args: dict[str, Any]) -> Any:
    timeout = float(args.get("timeout", 2))
    report = {}
    for target in args.get("targets", []):
        host, _, port = str(target).rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                report[target] = "ok"
        except (OSError, ValueError) as failure:
            report[target] = _describe(failure)
    return {"results": report}


def proxy_get(args: dict[str, Any]) -> Any:
    url = str(args.get("url", ""))
    proxies = {k: v for k, v in os.environ.items() if k.lower().endswith("_proxy")}
    try:
        with urllib.request.urlopen(url, timeout=float(args.get("timeout", 5))) as response:
            return {"status": response.status, "proxies": proxies}
    except urllib.error.HTTPError as failure:
        return {"status": failure.code, "proxies": proxies}
    except (OSError, ValueError) as failure:
        return {"error": _describe(failure), "proxies": proxies}


def ignore_term(args: dict[str, Any]) -> Any:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("misbehave: ignoring SIGTERM", file=sys.stderr, flush=True)
    while True:
        time.sleep(3600)


def garbage(args: dict[str, Any]) -> Any:
    sys.stdout.write("this is not JSON {\n")
    return None


ACTIONS: dict[str, Callable[[dict[str, Any]], Any]] = {
    action.__name__: action
    for action in (
        fork_bomb,
        hog_memory,
        fill_disk,
        flood_output,
        write_root,
        whoami,
        connect,
        proxy_get,
        ignore_term,
        garbage,
    )
}


def main() -> int:
    try:
        args = json.loads(os.environ.get("BH_ARGUMENTS") or "{}")
    except ValueError as error:
        return _emit({"error": f"BH_ARGUMENTS is not valid JSON: {error}"}, 1)
    action = args.get("action") if isinstance(args, dict) else None
    if action == "exit":
        code = args.get("code", 0)
        if not isinstance(code, int) or not 0 <= code <= 255:
            return _emit({"error": "'code' must be an integer from 0 to 255"}, 1)
        return _emit({"exit": code}, code)
    if action not in ACTIONS:
        return _emit({"error": f"'action' must be one of {[*ACTIONS, 'exit']}"}, 1)
    print(f"misbehave: {action}", file=sys.stderr, flush=True)
    report = ACTIONS[action](args)
    return 0 if report is None else _emit(report, 0)


def _describe(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    detail = str(reason if reason is not None else error)
    return f"{type(error).__name__}: {detail}" if detail else type(error).__name__


def _emit(document: Any, status: int) -> int:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
