"""The compose deployment's files without running it: ``docker-compose config -q``
accepts compose.yaml alone, with the offline override and with the test's; the secrets
command makes every file the compose file mounts, private and kept; the healthcheck
finds the probe port of PID 1 from /proc.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bh import container_probe
from bh.deploy_secrets import SERVICE_GID, ensure
from tests.deploy.deployment import COMPOSE, FILES
from tests.support.services import missing

#: what the test's override interpolates (any value does for the check)
_TEST_VARIABLES = (
    "BH_HANDS_API_PORT", "BH_EGRESS_NETWORK", "BH_HANDS_OWNER", "BH_DEPLOY_NETWORK",
    "BH_OUTSIDE_NETWORK", "BH_EMAIL_SERVICE_URL",
)  # fmt: skip


@pytest.mark.parametrize("count", [1, 2, 3], ids=["compose", "offline", "test"])
def test_docker_compose_accepts_the_files(count: int, tmp_path: Path) -> None:
    if shutil.which("docker-compose") is None:
        missing("docker-compose is not installed (scripts/install)")
    ensure(tmp_path / "secrets")
    env = {"PATH": os.environ["PATH"], "BH_SECRETS": str(tmp_path / "secrets")}
    env |= {name: "x" for name in _TEST_VARIABLES}
    files = [arg for path in FILES[:count] for arg in ("-f", str(path))]
    done = subprocess.run(
        ["docker-compose", *files, "config", "-q"],
        cwd=COMPOSE,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_secrets_command_makes_every_mounted_file_private_and_keeps_them(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "secrets"
    made = ensure(directory)
    declared = yaml.safe_load((COMPOSE / "compose.yaml").read_text())["secrets"]
    mounted = {Path(spec["file"]).name for spec in declared.values()}
    assert mounted <= set(made), mounted - set(made)
    for path in directory.iterdir():
        info = path.stat()
        assert not info.st_mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP), path
        if os.geteuid() == 0:
            assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, SERVICE_GID, 0o440)
    before = {path.name: path.read_text() for path in directory.iterdir()}
    (directory / "hands.secret").unlink()
    assert ensure(directory) == ["hands.secret"]  # only the missing one, the rest kept
    after = {path.name: path.read_text() for path in directory.iterdir()}
    assert {k: v for k, v in after.items() if k != "hands.secret"} == {
        k: v for k, v in before.items() if k != "hands.secret"
    }
    conf = (directory / "nats.conf").read_text()
    assert conf.count("nats://route:") == 3 and '"user": "brain"' in conf
    assert (directory / "redis.pass").read_text().strip() in (directory / "redis.conf").read_text()


def test_the_healthcheck_finds_the_loopback_port_pid_1_listens_on(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "1" / "fd").mkdir(parents=True)
    (proc / "1" / "net").mkdir()
    for fd, inode in (("3", "1111"), ("4", "2222"), ("5", "3333")):
        os.symlink(f"socket:[{inode}]", proc / "1" / "fd" / fd)
    os.symlink("/dev/null", proc / "1" / "fd" / "0")
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
    rows = [
        # the probe: 127.0.0.1:8081 listening, one of PID 1's sockets
        "0: 0100007F:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1111",
        # the egress proxy: on the sandbox network's gateway, not loopback
        "1: 010012AC:A000 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 2222",
        # an established connection of PID 1, and another process's listener
        "2: 0100007F:C000 0100007F:1092 01 00000000:00000000 00:00000000 00000000 0 0 3333",
        "3: 0100007F:2000 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 9999",
    ]
    (proc / "1" / "net" / "tcp").write_text("\n".join([header, *rows]) + "\n")
    assert container_probe.own_ports(proc=proc) == [8081]


def test_every_setting_of_compose_yaml_is_documented_and_every_host_port_is_one() -> None:
    """Issue 36: a port on the host — published, or bound by a service in the host's
    network namespace — is a setting (``${NAME:-default}``), never a number only an
    override can change; each setting the file reads is in docs/deploy-compose.md's
    table; and the header's usage runs one Hands (one per host: its probe port)."""
    text = (COMPOSE / "compose.yaml").read_text()
    assert fixed_host_ports(yaml.safe_load(text)) == []
    documented = (COMPOSE.parents[1] / "docs" / "deploy-compose.md").read_text()
    table = documented[documented.index("| setting | default | what |") :].split("\n\n")[0]
    read = set(re.findall(r"\$\{([A-Z0-9_]+)", text))
    assert read, "compose.yaml reads no setting"
    assert {name for name in read if f"`{name}`" not in table} == set()
    usage = [line for line in text.splitlines()[:20] if "up -d" in line]
    assert usage and all("--scale hands=" not in line for line in usage), usage
    assert "DOCKER_GID" not in text


def test_the_host_port_check_names_a_fixed_one() -> None:
    text = (COMPOSE / "compose.yaml").read_text()
    fixed = text.replace("${BH_HANDS_PROBE_PORT:-8081}", "8081")
    fixed = fixed.replace("${BH_SESSION_API_PUBLISH:-127.0.0.1:8460}", "127.0.0.1:8460")
    assert fixed_host_ports(yaml.safe_load(fixed)) == [
        "session-api publishes 127.0.0.1:8460:8460",
        "hands: BH_PROBE_PORT=8081 on the host's network",
    ]


def fixed_host_ports(document: dict[str, Any]) -> list[str]:
    """The host ports of a compose document that are numbers, not settings."""
    found = []
    for name, service in document["services"].items():
        found += [f"{name} publishes {p}" for p in service.get("ports", []) if "${" not in p]
        if service.get("network_mode") == "host":
            environment = service.get("environment", {})
            for variable in ("BH_PROBE_PORT", "BH_HANDS_API_PORT"):
                value = str(environment.get(variable, "${}"))
                if "${" not in value:
                    found.append(f"{name}: {variable}={value} on the host's network")
    return found
