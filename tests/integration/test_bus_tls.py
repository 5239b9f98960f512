"""The bus over TLS, as a multi-host deployment runs it: a nats-server of this test's own
with a certificate from a private CA and a password login; ``Bus.connect`` reaches it
with ``tls://`` and ``tls_ca`` in the URL, and a client that does not trust that CA is
refused."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from bh.devstack import binaries, probe
from bh.devstack.errors import DevstackError
from bh.devstack.poll import poll_until
from bus import Bus, BusSettings
from contracts import StoreUnavailable
from runtime.credentials import write_secret

pytestmark = [pytest.mark.nats]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _certificates(where: Path) -> dict[str, Path]:
    """A private CA and a server certificate for 127.0.0.1 signed by it."""
    ca, ca_key = where / "ca.pem", where / "ca.key"
    cert, key, csr = where / "server.pem", where / "server.key", where / "server.csr"
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
        *("-subj", "/CN=bh-test-ca", "-keyout", str(ca_key), "-out", str(ca)),
    )
    _openssl(
        *("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1"),
        *("-keyout", str(key), "-out", str(csr)),
    )
    extensions = where / "san.cnf"
    extensions.write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl(
        *("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key)),
        *("-CAcreateserial", "-days", "1", "-out", str(cert), "-extfile", str(extensions)),
    )
    return {"ca": ca, "cert": cert, "key": key}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, dict[str, Path]]]:
    try:
        server = binaries.nats_server()
    except DevstackError as error:
        pytest.skip(str(error))
    files = _certificates(tmp_path)
    write_secret(tmp_path / "app.pass", "tls-test-password")
    config = {
        "tls": {"cert_file": str(files["cert"]), "key_file": str(files["key"])},
        "authorization": {"users": [{"user": "app", "password": "tls-test-password"}]},
        "jetstream": {"store_dir": str(tmp_path / "js")},
    }
    conf = tmp_path / "nats.conf"
    write_secret(conf, json.dumps(config))
    port = _free_port()
    process = subprocess.Popen(
        [str(server), "-c", str(conf), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if not poll_until(lambda: probe.tcp_open("127.0.0.1", port), timeout=timedelta(seconds=15)):
            pytest.fail(f"nats-server with TLS did not listen on {port}")
        yield port, {**files, "passfile": tmp_path / "app.pass"}
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_the_bus_connects_over_tls_with_a_private_ca(
    tls_server: tuple[int, dict[str, Path]],
) -> None:
    port, files = tls_server
    url = f"tls://app@127.0.0.1:{port}?passfile={files['passfile']}&tls_ca={files['ca']}"

    bus = await Bus.connect(BusSettings(url=url, namespace="tlstest"))
    try:
        assert bus.nc.connected_url is not None and bus.nc.connected_url.scheme == "tls"
        assert await bus.publish("tools.dispatch.echo", b"{}", msg_id="m1")
    finally:
        await bus.close()


async def test_a_client_that_does_not_trust_the_servers_ca_is_refused(
    tls_server: tuple[int, dict[str, Path]],
) -> None:
    port, files = tls_server
    url = f"tls://app@127.0.0.1:{port}?passfile={files['passfile']}"  # system CAs only
    settings = BusSettings(url=url, namespace="tlstest", connect_timeout=3)
    with pytest.raises(StoreUnavailable):
        await Bus.connect(settings)
