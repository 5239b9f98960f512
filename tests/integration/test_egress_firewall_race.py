"""A Hands and a Hands API start together on one host and share one egress bridge: both
install its firewall chain at the same moment (issue 31, finding 11: the second
``ip6tables -N BH-<bridge>`` failed with "File exists" and the API exited). Creating what
may already exist is idempotent: each install succeeds, and the chain ends with exactly
one DROP and is jumped to from INPUT exactly once, in iptables and ip6tables; removing
it twice at once succeeds too.

Real iptables on a made-up bridge name (no interface is needed for the rules), so it
needs root, like the Hands' firewall itself."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from hands.egress.firewall import BridgeFirewall
from tests.support.services import in_ci

ROUNDS = 12


@pytest.fixture
def tables() -> list[str]:
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        message = "the egress firewall needs root and iptables"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return ["iptables"] + (["ip6tables"] if shutil.which("ip6tables") else [])


@pytest.fixture
def bridge(tables: list[str]) -> Iterator[str]:
    name = f"bhr{uuid.uuid4().hex[:8]}"
    yield name
    chain = f"BH-{name}"
    for binary in tables:  # whatever a failed round left
        while _run(binary, "-D", "INPUT", "-i", name, "-j", chain).returncode == 0:
            pass
        _run(binary, "-F", chain)
        _run(binary, "-X", chain)


def _run(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, "-w", *args], capture_output=True, text=True, check=False)


def _rules(binary: str, chain: str) -> list[str]:
    listed = _run(binary, "-S", chain)
    return listed.stdout.splitlines() if listed.returncode == 0 else []


def _firewall(bridge: str, port: int) -> BridgeFirewall:
    return BridgeFirewall(interface=bridge, address="10.213.0.1", port=port)


async def test_two_firewalls_installing_one_chain_at_once_both_succeed_and_leave_one_drop(
    tables: list[str], bridge: str
) -> None:
    chain = f"BH-{bridge}"
    for round_ in range(ROUNDS):
        hands, api = _firewall(bridge, 3128), _firewall(bridge, 3129)
        await asyncio.gather(hands.install(), api.install())
        for binary in tables:
            rules = _rules(binary, chain)
            assert rules[-1] == f"-A {chain} -j DROP", (round_, binary, rules)
            assert rules.count(f"-A {chain} -j DROP") == 1, (round_, binary, rules)
            jumps = [rule for rule in _rules(binary, "INPUT") if rule.endswith(f"-j {chain}")]
            assert jumps == [f"-A INPUT -i {bridge} -j {chain}"], (round_, binary, jumps)
        accepts = [rule for rule in _rules("iptables", chain) if "ACCEPT" in rule]
        assert len(accepts) == 2, (round_, accepts)  # each proxy's own
        await asyncio.gather(hands.remove(), api.remove())
        for binary in tables:
            assert _run(binary, "-n", "-L", chain).returncode != 0, (round_, binary)
            assert not [rule for rule in _rules(binary, "INPUT") if chain in rule]
