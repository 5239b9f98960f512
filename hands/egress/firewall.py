"""The host firewall of the egress network: from its bridge, only TCP to the proxy.

Docker's ``internal`` networks stop forwarding to the outside, but the host itself is
the containers' gateway (Docker 20.10 even gives them a default route to it), so every
service of the host — on the gateway address, on any other host address, bound to
0.0.0.0 — is reachable from them. These rules, in a chain of our own jumped to from
``INPUT`` for the bridge interface, accept only TCP to the proxy's address and port and
drop everything else the bridge sends to the host (IPv6 too, when ``ip6tables`` exists).

Needs root (CAP_NET_ADMIN) and the ``iptables`` binary. ``install`` is idempotent and
replaces stale rules (a restarted Hands on another port) without an open window;
``fence`` keeps only the drop (the proxy is gone but containers may still run);
``remove`` deletes everything.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from typing import Self

from contracts import InvalidInput

log = logging.getLogger(__name__)


class BridgeFirewall:
    def __init__(
        self,
        *,
        interface: str,
        address: str,
        port: int,
        iptables: str = "iptables",
        ip6tables: str | None = "ip6tables",
    ) -> None:
        self.interface = interface
        self.chain = f"BH-{interface}"[:28]
        self._accept = ["-p", "tcp", "-d", address, "--dport", str(port), "-j", "ACCEPT"]
        self._tables = [iptables] + ([ip6tables] if ip6tables and shutil.which(ip6tables) else [])

    async def install(self) -> None:
        """Accept TCP to the proxy, drop the rest from the bridge (idempotent)."""
        for index, binary in enumerate(self._tables):
            wanted = [self._accept] if index == 0 else []
            await self._ensure_chain(binary, [*wanted, ["-j", "DROP"]])
            await self._ensure_jump(binary)

    async def fence(self) -> None:
        """Drop everything from the bridge (the proxy is stopped)."""
        for binary in self._tables:
            await self._ensure_chain(binary, [["-j", "DROP"]])
            await self._ensure_jump(binary)

    async def remove(self) -> None:
        """Delete the jump and the chain (absent is fine)."""
        for binary in self._tables:
            jump = ["INPUT", "-i", self.interface, "-j", self.chain]
            while await _iptables(binary, "-C", *jump, check=False) == 0:
                await _iptables(binary, "-D", *jump)
            if await _iptables(binary, "-n", "-L", self.chain, check=False) == 0:
                await _iptables(binary, "-F", self.chain)
                await _iptables(binary, "-X", self.chain)

    async def __aenter__(self) -> Self:
        await self.install()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.remove()

    async def _ensure_chain(self, binary: str, rules: list[list[str]]) -> None:
        """Make the chain hold exactly ``rules``, in order, never passing through a
        state that accepts more than either the old or the new rules."""
        if await _iptables(binary, "-n", "-L", self.chain, check=False) != 0:
            await _iptables(binary, "-N", self.chain)
        # The wanted rules go on top first, then whatever follows them (stale rules, e.g.
        # the ACCEPT of an older port) is deleted.
        for position, rule in enumerate(rules, start=1):
            await _iptables(binary, "-I", self.chain, str(position), *rule)
        while await _iptables(binary, "-D", self.chain, str(len(rules) + 1), check=False) == 0:
            pass
        listed = await _output(binary, "-S", self.chain)
        if sum(line.startswith("-A ") for line in listed.splitlines()) != len(rules):
            raise InvalidInput(f"{binary} chain {self.chain} does not hold the expected rules")

    async def _ensure_jump(self, binary: str) -> None:
        jump = ["-i", self.interface, "-j", self.chain]
        if await _iptables(binary, "-C", "INPUT", *jump, check=False) != 0:
            await _iptables(binary, "-I", "INPUT", "1", *jump)


async def _iptables(binary: str, *args: str, check: bool = True) -> int:
    code, output = await _exec(binary, *args)
    if check and code != 0:
        raise InvalidInput(
            f"`{binary} {' '.join(args)}` failed ({code}): {output.strip()}; the egress "
            "firewall needs root (CAP_NET_ADMIN) and iptables on the Docker host"
        )
    return code


async def _output(binary: str, *args: str) -> str:
    code, output = await _exec(binary, *args)
    if code != 0:
        raise InvalidInput(f"`{binary} {' '.join(args)}` failed ({code}): {output.strip()}")
    return output


async def _exec(binary: str, *args: str) -> tuple[int, str]:
    try:
        process = await asyncio.create_subprocess_exec(
            binary,
            "-w",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except FileNotFoundError as error:
        raise InvalidInput(f"{binary} is not installed: the egress firewall needs it") from error
    output, _ = await process.communicate()
    return process.returncode or 0, output.decode(errors="replace")
