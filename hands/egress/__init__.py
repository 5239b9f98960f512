"""Allowlisted egress for sandboxed tools: an internal Docker network, a host firewall
that lets its containers reach only the proxy, and the proxy, which admits an operation
by its credentials, forwards only to its tool's allowed destinations, and adds the
credentials configured for them (see ``docs/hardening.md``).
"""

from hands.egress.firewall import BridgeFirewall
from hands.egress.gateway import EgressGateway
from hands.egress.network import EgressNetwork, ensure_egress_network, remove_egress_network
from hands.egress.proxy import Credentials, EgressProxy, PolicyResolver, ProxyLimits
from hands.egress.route import EgressRoute, proxy_token

__all__ = [
    "BridgeFirewall",
    "Credentials",
    "EgressGateway",
    "EgressNetwork",
    "EgressProxy",
    "EgressRoute",
    "PolicyResolver",
    "ProxyLimits",
    "ensure_egress_network",
    "proxy_token",
    "remove_egress_network",
]
