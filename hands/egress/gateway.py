"""Everything the Hands runs for allowed egress, started and stopped together.

``EgressGateway`` ensures the internal network, starts the proxy on the network's
gateway address (so the host must share its network namespace with the Hands), and
installs the bridge firewall. ``route`` is what ``DockerSandboxConfig.egress`` takes.
"""

from __future__ import annotations

from typing import Self

from pydantic import SecretStr

from hands.egress.firewall import BridgeFirewall
from hands.egress.network import EgressNetwork, ensure_egress_network, remove_egress_network
from hands.egress.proxy import Credentials, EgressProxy, PolicyResolver, ProxyLimits
from hands.egress.route import EgressRoute


class EgressGateway:
    def __init__(
        self,
        *,
        docker_url: str,
        secret: SecretStr,
        policy: PolicyResolver,
        credentials: Credentials | None = None,
        network: str = "bh-egress",
        port: int = 0,
        limits: ProxyLimits | None = None,
        iptables: str = "iptables",
        ip6tables: str | None = "ip6tables",
    ) -> None:
        self._docker_url = docker_url
        self._network_name = network
        self._port = port
        self._tables = (iptables, ip6tables)
        self.proxy = EgressProxy(
            secret=secret, policy=policy, credentials=credentials, limits=limits
        )
        self.network: EgressNetwork | None = None
        self.firewall: BridgeFirewall | None = None

    async def start(self) -> EgressRoute:
        """Network, proxy, firewall (in that order: the proxy's port is in the rules)."""
        self.network = await ensure_egress_network(
            docker_url=self._docker_url, name=self._network_name
        )
        await self.proxy.start(self.network.gateway, self._port)
        try:
            host, port = self.proxy.address
            self.firewall = BridgeFirewall(
                interface=self.network.bridge,
                address=host,
                port=port,
                iptables=self._tables[0],
                ip6tables=self._tables[1],
            )
            await self.firewall.install()
        except BaseException:
            await self.proxy.close()
            raise
        return self.route

    @property
    def route(self) -> EgressRoute:
        if self.network is None:
            raise RuntimeError("the egress gateway is not started")
        return self.proxy.route(self.network.id)

    async def close(self, *, teardown: bool = False) -> None:
        """Stop the proxy. Containers may outlive this process, so by default the
        firewall stays, dropping everything from the bridge; ``teardown`` also removes
        the rules and the network (which must have no containers left)."""
        await self.proxy.close()
        if self.firewall is not None:
            if teardown:
                await self.firewall.remove()
            else:
                await self.firewall.fence()
        if teardown and self.network is not None:
            await remove_egress_network(docker_url=self._docker_url, name=self.network.id)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
