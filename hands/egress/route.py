"""How a sandboxed run reaches the egress proxy: the network it joins and its proxy URL.

The proxy knows an operation by credentials in its proxy URL: the operation id and a
token, HMAC-SHA256(hands secret, operation id). The token is derived, not stored, so a
Hands that restarts with the same secret still admits a container started before.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from urllib.parse import quote

from pydantic import SecretStr


def proxy_token(secret: SecretStr, operation_id: str) -> str:
    """The proxy password of ``operation_id`` (hex)."""
    key = secret.get_secret_value().encode()
    return hmac.new(key, operation_id.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class EgressRoute:
    """Where containers whose tool allows egress go: ``network`` (the id of the internal
    Docker network, the only one they join) and the proxy at ``host:port`` on its gateway."""

    network: str
    host: str
    port: int
    secret: SecretStr

    def proxy_url(self, operation_id: str) -> str:
        # Operation ids may hold ':' and '@', which must not end the userinfo part;
        # HTTP clients unquote it before building Proxy-Authorization.
        user = quote(operation_id, safe="")
        return f"http://{user}:{proxy_token(self.secret, operation_id)}@{self.host}:{self.port}"

    def environment(self, operation_id: str) -> dict[str, str]:
        """The proxy variables of a container (both spellings; nothing bypasses it)."""
        url = self.proxy_url(operation_id)
        return {
            "HTTP_PROXY": url,
            "HTTPS_PROXY": url,
            "http_proxy": url,
            "https_proxy": url,
            "NO_PROXY": "",
            "no_proxy": "",
        }
