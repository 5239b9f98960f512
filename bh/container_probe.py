"""A container's healthcheck without curl: ``python3 -m bh.container_probe URL`` asks a
service's ``/readyz`` (or ``/livez``) and exits 0 on 200, 1 otherwise with one line
saying why (the failing checks the service named, or the connection error).

``--own PATH`` asks the service whose process is this container's PID 1 on the loopback
port it listens on: a Hands in the host's network namespace (compose, to run its egress
proxy) shares the host's ports, so several on one host each take a free probe port
(``BH_PROBE_PORT=0``) and the healthcheck finds it from PID 1's sockets.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

_LISTEN = "0A"
_LOOPBACK = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it


def ask(url: str, timeout: float = 4.0) -> tuple[bool, str]:
    """Whether ``url`` answers 200, and a line saying what it answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return True, f"{answer.status} {answer.read(500).decode(errors='replace')}"
    except urllib.error.HTTPError as error:
        return False, f"{error.code} {error.read(500).decode(errors='replace')}"
    except (OSError, ValueError) as error:
        return False, f"{url}: {error}"


def own_ports(pid: int = 1, proc: Path = Path("/proc")) -> list[int]:
    """The loopback TCP ports process ``pid`` listens on."""
    inodes = set()
    for fd in (proc / str(pid) / "fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = []
    for line in (proc / str(pid) / "net" / "tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, port = fields[1].split(":")
        if fields[3] == _LISTEN and address == _LOOPBACK and fields[9] in inodes:
            ports.append(int(port, 16))
    return sorted(ports)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--own":
        ports = own_ports()
        if not ports:
            print("PID 1 listens on no loopback port (yet)")
            return 1
        urls = [f"http://127.0.0.1:{port}{argv[1]}" for port in ports]
    elif len(argv) == 1:
        urls = argv
    else:
        print("usage: python3 -m bh.container_probe URL | --own PATH", file=sys.stderr)
        return 2
    for url in urls:
        ok, said = ask(url)
        print(" ".join(said.split()))
        if ok:
            return 0
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
