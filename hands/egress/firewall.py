"""The host firewall of the egress network: from its bridge, only TCP to the proxy.

Docker's ``internal`` networks stop forwarding to the outside, but the host itself is
the containers' gateway (Docker 20.10 even gives them a default route to it), so every
service of the host — on the gateway address, on any other host address, bound to
0.0.0.0 — is reachable from them. These rules, in a chain of our own jumped to from
``INPUT`` for the bridge interface, accept only TCP to the proxy's address and port and
drop everything else the bridge sends to the host (IPv6 too, when ``ip6tables`` exists).

Needs root (CAP_NET_ADMIN) and the ``iptables`` binary. Several Hands on one host share
the chain: ``install`` (idempotent) adds this proxy's accept above the final drop and
never removes another's; ``fence`` withdraws only this proxy's accept (the proxy is
gone but containers may still run); ``remove`` deletes everything (teardown). An
accept left by a Hands that was SIGKILLed names a port nobody listens on until a
proxy takes it again.
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
        """Accept TCP to this proxy, drop the rest from the bridge (idempotent). Several
        Hands on one host (each with its proxy port) share the chain: each adds its own
        accept above the final drop and never removes another's."""
        for index, binary in enumerate(self._tables):
            await self._ensure_drop_last(binary)
            if index == 0 and await _iptables(binary, "-C", self.chain, *self._accept, check=False):
                await _iptables(binary, "-I", self.chain, "1", *self._accept)
            await self._ensure_jump(binary)

    async def fence(self) -> None:
        """Withdraw this proxy's accept (it is stopped); the drop stays, so containers
        that outlive this process reach nothing."""
        for binary in self._tables:
            await self._ensure_drop_last(binary)
            while await _iptables(binary, "-D", self.chain, *self._accept, check=False) == 0:
                pass
            await self._ensure_jump(binary)

    async def _ensure_drop_last(self, binary: str) -> None:
        if await _iptables(binary, "-n", "-L", self.chain, check=False) != 0:
            await _iptables(binary, "-N", self.chain)
        listed = (await _output(binary, "-S", self.chain)).splitlines()
        if not listed or listed[-1].strip() != f"-A {self.chain} -j DROP":
            await _iptables(binary, "-A", self.chain, "-j", "DROP")

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
