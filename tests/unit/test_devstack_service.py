"""Pure logic of `bh dev`: settings from the environment, service descriptions, env file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bh.devstack import catalog, docker_engine, envfile
from bh.devstack.config import DevConfig, Ports
from bh.devstack.errors import DevstackError
from bh.devstack.process import PidRecord, read_pidfile, write_pidfile
from bh.devstack.report import Report, State
from bh.devstack.service import Service
from bh.devstack.state import StateDir


def _checkout(root: Path, name: str = "brainhands") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f'[project]\nname = "{name}"\n')
    return root


def _services(environ: dict[str, str], home: Path) -> dict[str, Service]:
    config = DevConfig.from_env({**environ, "BH_DEV_HOME": str(home)})
    services = catalog.services(config, StateDir(config.home), say=lambda _: None)
    return {service.name: service for service in services}


def test_defaults_use_the_documented_ports_and_the_checkout_state_dir(tmp_path: Path) -> None:
    config = DevConfig.from_env({}, checkout=_checkout(tmp_path / "repo"))
    assert config.ports == Ports(redis=16379, nats=14222, nats_http=18222, moto=15000)
    assert config.home == tmp_path / "repo" / ".dev"
    assert config.host == "127.0.0.1"


def test_bh_dev_home_overrides_the_state_dir(tmp_path: Path) -> None:
    config = DevConfig.from_env({"BH_DEV_HOME": str(tmp_path / "x")}, checkout=tmp_path)
    assert config.home == tmp_path / "x"


def test_outside_a_checkout_state_goes_to_the_user_cache(tmp_path: Path) -> None:
    other_project = _checkout(tmp_path / "other", name="not-brainhands")
    config = DevConfig.from_env({"XDG_CACHE_HOME": str(tmp_path / "c")}, checkout=other_project)
    assert config.home == tmp_path / "c" / "brainhands" / "dev"


def test_ports_come_from_the_environment(tmp_path: Path) -> None:
    environ = {
        "BH_DEV_REDIS_PORT": "26379",
        "BH_DEV_NATS_PORT": "24222",
        "BH_DEV_NATS_HTTP_PORT": "28222",
        "BH_DEV_MOTO_PORT": "25000",
    }
    services = _services(environ, tmp_path)
    assert services["redis"].address == "redis://127.0.0.1:26379/0"
    secrets = tmp_path / "secrets"
    assert services["redis"].exports == {
        "BH_REDIS_URL": f"redis://127.0.0.1:26379/0?passfile={secrets}/redis.pass"
    }
    assert services["nats"].ports == (24222, 28222)
    nats_exports = services["nats"].exports
    assert nats_exports["BH_NATS_URL"] == (
        f"nats://operator@127.0.0.1:24222?passfile={secrets}/nats-operator.pass"
    )
    assert nats_exports["BH_NATS_URL_HANDS"] == (
        f"nats://hands@127.0.0.1:24222?passfile={secrets}/nats-hands.pass"
    )
    assert services["moto"].exports["BH_AWS_ENDPOINT_URL"] == "http://127.0.0.1:25000"
    assert services["moto"].launches() == (
        (sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "25000"),
    )


@pytest.mark.parametrize("value", ["http", "0", "70000", "-1"])
def test_a_bad_port_is_rejected_naming_the_variable(value: str) -> None:
    with pytest.raises(DevstackError, match=r"BH_DEV_MOTO_PORT.*1-65535"):
        DevConfig.from_env({"BH_DEV_MOTO_PORT": value, "BH_DEV_HOME": "/x"})


def test_two_services_on_one_port_are_rejected() -> None:
    with pytest.raises(DevstackError, match="BH_DEV_REDIS_PORT and BH_DEV_MOTO_PORT"):
        DevConfig.from_env({"BH_DEV_MOTO_PORT": "16379", "BH_DEV_HOME": "/x"})


def test_services_keep_logs_pids_and_data_under_the_state_dir(tmp_path: Path) -> None:
    services = _services({}, tmp_path)
    assert list(services) == ["redis", "nats", "moto", "docker", "rgw"]
    for name, service in services.items():
        assert service.log_path == tmp_path / "logs" / f"{name}.log"
        assert service.pid_path == tmp_path / "run" / f"{name}.pid"
    redis_argv = services["redis"].launches()[0]
    assert redis_argv[redis_argv.index("--dir") + 1] == str(tmp_path / "data" / "redis")
    assert redis_argv[redis_argv.index("--save") + 1] == ""  # no snapshots


def test_docker_falls_back_to_vfs_and_exports_its_socket(tmp_path: Path) -> None:
    docker = _services({}, tmp_path)["docker"]
    assert docker.exports == {"DOCKER_HOST": "unix:///var/run/docker.sock"}
    assert docker.address == "unix:///var/run/docker.sock"
    try:
        default, fallback = docker.launches()
    except DevstackError:
        pytest.skip("dockerd is not installed here")
    assert fallback == (*default, "--storage-driver=vfs")


def test_a_dockerd_pidfile_left_by_a_dead_engine_is_removed(tmp_path: Path) -> None:
    """dockerd refuses to start while its pid file exists, even when the pid in it died
    with the machine (or names another process now): that file is removed first."""
    dead = tmp_path / "dead.pid"
    dead.write_text(f"{_a_dead_pid()}\n")
    not_dockerd = tmp_path / "recycled.pid"
    not_dockerd.write_text(f"{os.getpid()}\n")  # alive, but this is python, not dockerd
    garbage = tmp_path / "garbage.pid"
    garbage.write_text("not a pid")
    for path in (dead, not_dockerd, garbage):
        assert docker_engine.clear_stale_pidfile(path, "dockerd") is True
        assert not path.exists()
    assert docker_engine.clear_stale_pidfile(tmp_path / "absent.pid", "dockerd") is False
    alive = tmp_path / "alive.pid"
    alive.write_text(f"{os.getpid()}\n")
    program = psutil.Process().name()
    assert docker_engine.clear_stale_pidfile(alive, program) is False  # it runs: kept
    assert alive.exists()


def _a_dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_env_file_lines_are_shell_quoted() -> None:
    rendered = envfile.render({"BH_REDIS_URL": "redis://127.0.0.1:16379/0", "ODD": "a b'c"})
    assert rendered == ("export BH_REDIS_URL=redis://127.0.0.1:16379/0\nexport ODD='a b'\"'\"'c'\n")


def test_env_file_has_every_variable_the_tests_read(tmp_path: Path) -> None:
    exports: dict[str, str] = {}
    for service in _services({}, tmp_path).values():
        exports.update(service.exports)
    envfile.write(tmp_path / "env", exports)
    lines = (tmp_path / "env").read_text().splitlines()
    secrets = tmp_path / "secrets"
    nats = "nats://{0}@127.0.0.1:14222?passfile={1}/nats-{0}.pass"
    assert lines == [
        f"export BH_REDIS_URL='redis://127.0.0.1:16379/0?passfile={secrets}/redis.pass'",
        f"export BH_NATS_URL='{nats.format('operator', secrets)}'",
        *(
            f"export BH_NATS_URL_{role.upper()}='{nats.format(role, secrets)}'"
            for role in ("brain", "hands", "scheduler", "api")
        ),
        "export BH_AWS_ENDPOINT_URL=http://127.0.0.1:15000",
        "export AWS_ACCESS_KEY_ID=testing",
        "export AWS_SECRET_ACCESS_KEY=testing",
        "export AWS_DEFAULT_REGION=us-east-1",
        "export DOCKER_HOST=unix:///var/run/docker.sock",
        "export BH_RGW_ENDPOINT_URL=http://127.0.0.1:17480",
        f"export BH_RGW_CREDENTIALS_FILE={secrets}/rgw.credentials",
    ]


def test_pidfile_round_trips_and_garbage_reads_as_none(tmp_path: Path) -> None:
    record = PidRecord(pid=42, argv=("/bin/x", "--save", ""), start_ticks=7)
    write_pidfile(tmp_path / "x.pid", record)
    assert read_pidfile(tmp_path / "x.pid") == record
    (tmp_path / "bad.pid").write_text("42\n")
    assert read_pidfile(tmp_path / "bad.pid") is None
    assert read_pidfile(tmp_path / "missing.pid") is None


@pytest.mark.parametrize(
    ("state", "required", "fatal"),
    [
        (State.FAILED, True, True),
        (State.FAILED, False, False),
        (State.SKIPPED, False, False),
        (State.EXTERNAL, True, False),
        (State.NOT_ANSWERING, True, True),
    ],
)
def test_only_a_required_service_that_is_not_up_is_fatal(
    state: State, required: bool, fatal: bool
) -> None:
    report = Report(service="s", state=state, address="a", log_path=Path("l"), required=required)
    assert report.fatal is fatal
