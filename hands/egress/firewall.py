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

Processes install at the same moment (a Hands and a Hands API starting together on one
bridge), and no lock spans them: in compose each is a container of its own, sharing
only the network namespace. So every step is a check that converges, not a
check-then-act: a chain another process created meanwhile is taken as made, the final
DROP and the INPUT jump are brought to exactly one each (added when missing, the
surplus of a race deleted, looked at again until it holds), and removing what another
process removed already succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import random
import shutil
from collections.abc import Callable
from typing import Self

from contracts import InvalidInput, StoreUnavailable

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

    async def remove(self) -> None:
        """Delete the jump and the chain (absent is fine, also when another process
        removes them at the same time)."""
        for binary in self._tables:
            while await _iptables(binary, "-D", *self._jump("INPUT"), check=False) == 0:
                pass
            await _iptables(binary, "-F", self.chain, check=False)
            code, output = await _exec(binary, "-X", self.chain)
            if code != 0 and await self._exists(binary):
                raise InvalidInput(f"`{binary} -X {self.chain}` failed ({code}): {output.strip()}")

    async def __aenter__(self) -> Self:
        await self.install()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.remove()

    async def _ensure_drop_last(self, binary: str) -> None:
        await self._ensure_chain(binary)
        drop = ["-j", "DROP"]
        await _exactly_one(
            binary,
            self.chain,
            f"-A {self.chain} -j DROP",
            add=["-A", self.chain, *drop],
            delete=["-D", self.chain, *drop],  # the first: a surplus drop is never the last
            placed=lambda rules, rule: rules[-1] == rule,
        )

    async def _ensure_jump(self, binary: str) -> None:
        await _exactly_one(
            binary,
            "INPUT",
            f"-A INPUT -i {self.interface} -j {self.chain}",
            add=["-I", *self._jump("INPUT", "1")],
            delete=["-D", *self._jump("INPUT")],
        )

    async def _ensure_chain(self, binary: str) -> None:
        """The chain, made unless it exists — or another process made it meanwhile."""
        if await self._exists(binary):
            return
        code, output = await _exec(binary, "-N", self.chain)
        if code != 0 and not await self._exists(binary):
            raise InvalidInput(f"`{binary} -N {self.chain}` failed ({code}): {output.strip()}")

    async def _exists(self, binary: str) -> bool:
        return await _iptables(binary, "-n", "-L", self.chain, check=False) == 0

    def _jump(self, chain: str, *position: str) -> list[str]:
        return [chain, *position, "-i", self.interface, "-j", self.chain]


#: rounds of looking again before a rule that others keep changing is given up on
_ROUNDS = 20


async def _exactly_one(
    binary: str,
    chain: str,
    rule: str,
    *,
    add: list[str],
    delete: list[str],
    placed: Callable[[list[str], str], bool] = lambda rules, rule: True,
) -> None:
    """Bring ``chain`` to hold ``rule`` (as ``-S`` lists it) exactly once, where
    ``placed`` wants it: add it when missing or misplaced, delete a surplus (two
    processes adding at once), and look again until it holds. Two processes deleting
    a surplus at once may leave none: the next look adds it again. A random pause
    between rounds breaks a lockstep."""
    for attempt in range(_ROUNDS):
        rules = (await _output(binary, "-S", chain)).splitlines()
        found = rules.count(rule)
        if found == 1 and placed(rules, rule):
            return
        if found > 1:
            await _iptables(binary, *delete, check=False)  # gone meanwhile: looked at again
        else:
            await _iptables(binary, *add)
        await asyncio.sleep(random.uniform(0, 0.005 * attempt))
    raise StoreUnavailable(
        f"`{binary}`: {chain} kept changing under other processes ({_ROUNDS} rounds); "
        f"could not leave `{rule}` in it exactly once"
    )


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
