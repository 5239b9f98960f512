"""The pure parts of the plugins image (``bh/plugin_image.py``): which directories are
plugins, what goes into the build hash, how the build context is laid out, and the
``bh images build --plugin`` argument checks — no Docker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bh import images_commands
from bh.images_commands import app
from bh.plugin_image import (
    PLUGINS_REPOSITORY,
    RECIPE,
    _conflict,
    _wheel,
    assemble_context,
    plugin_sources,
    plugins_hash,
    plugins_name,
    reported_wheels,
    source_files,
)
from contracts.errors import InvalidInput
from hands.images import BuiltImage
from tests.support.plugin_packages import tiny_package


def test_a_plugin_is_a_directory_with_a_pyproject(tmp_path: Path) -> None:
    package = tiny_package(tmp_path / "pkg")
    assert plugin_sources([package, tmp_path / "pkg" / ".." / "pkg"]) == [package]
    with pytest.raises(InvalidInput, match="not a directory"):
        plugin_sources([tmp_path / "absent"])
    with pytest.raises(InvalidInput, match=r"no pyproject\.toml"):
        plugin_sources([tmp_path])
    with pytest.raises(InvalidInput, match="not a directory"):
        plugin_sources([package / "pyproject.toml"])


def test_the_image_name_is_a_repository_without_a_tag() -> None:
    assert plugins_name(PLUGINS_REPOSITORY) == PLUGINS_REPOSITORY
    assert plugins_name("localhost:5000/team/agent") == "localhost:5000/team/agent"
    for bad in ("", "agent:1", "team/agent:latest", "Team/Agent", "agent@sha256:00", "team/"):
        with pytest.raises(InvalidInput, match="--service-image"):
            plugins_name(bad)


def test_build_output_and_caches_are_not_sources(tmp_path: Path) -> None:
    package = tiny_package(tmp_path / "pkg")
    before = plugins_hash("sha256:service", [package])
    for litter in ("build/lib/x.py", "dist/x.whl", "tinyplug.egg-info/PKG-INFO", ".git/HEAD"):
        (package / litter).parent.mkdir(parents=True, exist_ok=True)
        (package / litter).write_text("litter")
    (package / "tinyplug" / "__pycache__").mkdir()
    (package / "tinyplug" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    # a package of the user's may be called ``build``: only the top level's is output
    (package / "tinyplug" / "build").mkdir()
    (package / "tinyplug" / "build" / "__init__.py").write_text("")
    relative = {path.relative_to(package).as_posix() for path in source_files(package)}
    assert relative == {"pyproject.toml", "tinyplug/__init__.py", "tinyplug/build/__init__.py"}
    (package / "tinyplug" / "build" / "__init__.py").unlink()
    assert plugins_hash("sha256:service", [package]) == before


def test_the_hash_follows_the_service_image_the_sources_and_their_order(tmp_path: Path) -> None:
    one, two = tiny_package(tmp_path / "one"), tiny_package(tmp_path / "two")
    wanted = plugins_hash("sha256:a", [one])
    assert wanted.startswith("sha256:") and wanted == plugins_hash("sha256:a", [one])
    assert plugins_hash("sha256:b", [one]) != wanted
    assert plugins_hash("sha256:a", [one, two]) != wanted
    (one / "tinyplug" / "__init__.py").write_text("def plugin() -> str:\n    return 'ho'\n")
    assert plugins_hash("sha256:a", [one]) != wanted
    (one / "tinyplug" / "__init__.py").rename(one / "tinyplug" / "other.py")
    assert plugins_hash("sha256:a", [one]) != wanted


def test_the_hash_follows_the_recipe(tmp_path: Path) -> None:
    package = tiny_package(tmp_path / "pkg")
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "Dockerfile").write_text("FROM x\n")
    wanted = plugins_hash("sha256:a", [package], recipe)
    assert plugins_hash("sha256:a", [package]) != wanted
    (recipe / "Dockerfile").write_text("FROM y\n")
    assert plugins_hash("sha256:a", [package], recipe) != wanted


def test_the_context_holds_the_recipe_the_plugins_and_only_the_needed_wheels(
    tmp_path: Path,
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    own, dependency, pip = (
        wheels / name
        for name in (
            "tinyplug-0.1.0-py3-none-any.whl",
            "six-1.0-py3-none-any.whl",
            "pip-26.3-py3-none-any.whl",
        )
    )
    for wheel in (own, dependency, pip):
        wheel.write_bytes(wheel.name.encode())
    context = tmp_path / "context"
    context.mkdir()
    assemble_context(context, [own], [dependency], pip)
    found = {path.relative_to(context).as_posix() for path in context.rglob("*") if path.is_file()}
    assert found == {
        "Dockerfile",
        f"plugins/{own.name}",
        f"wheels/{dependency.name}",
        f"wheels/{pip.name}",
    }
    assert (context / "Dockerfile").read_text() == (RECIPE / "Dockerfile").read_text()
    # a package without dependencies: nothing but pip beside it
    bare = tmp_path / "bare"
    bare.mkdir()
    assemble_context(bare, [own], [], pip)
    assert sorted(path.name for path in (bare / "wheels").iterdir()) == [pip.name]


def test_the_recipe_installs_offline_and_gives_the_user_back() -> None:
    recipe = (RECIPE / "Dockerfile").read_text()
    assert "FROM ${SERVICE}" in recipe and "--no-index" in recipe
    steps = [line.split()[0] for line in recipe.splitlines() if line and line[0].isupper()]
    assert steps[-1] == "USER" and recipe.rstrip().endswith("USER 10001:10001")
    assert "ENTRYPOINT" not in steps and "CMD" not in steps  # the service image's


def test_the_dependencies_to_ship_are_the_downloaded_ones_pip_would_install(
    tmp_path: Path,
) -> None:
    report = {
        "install": [
            {"download_info": {"url": "file:///own/tinyplug-0.1.0-py3-none-any.whl"}},
            {"download_info": {"url": "file:///deps/six-1.0-py3-none-any.whl"}},
        ]
    }
    assert reported_wheels(report, tmp_path, "/deps") == [tmp_path / "six-1.0-py3-none-any.whl"]
    assert reported_wheels({"install": []}, tmp_path, "/deps") == []


def test_a_package_whose_wheel_does_not_build_is_one_clear_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("not [toml\n")
    with pytest.raises(InvalidInput) as raised:
        _wheel(broken, tmp_path / "wheels", tmp_path / "copy")
    message = raised.value.message
    assert "\n" not in message
    assert message.startswith(f"--plugin {broken}: its wheel does not build (")
    assert not (broken / "build").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--plugin", "{absent}"], "not a directory"),
        (["--plugin", "{tmp}"], "no pyproject.toml"),
        (["--service-image", "team/agent"], "give --plugin"),
        (["--plugin", "{package}", "--service-image", "team/agent:1"], "without a tag"),
    ],
)
def test_bad_plugin_arguments_exit_2_before_any_build(
    tmp_path: Path, args: list[str], said: str
) -> None:
    package = tiny_package(tmp_path / "pkg")
    paths = {"absent": tmp_path / "absent", "tmp": tmp_path, "package": package}
    filled = [arg.format(**paths) for arg in args]
    # an engine that is not there: any build would fail otherwise than invalid_input
    env = {"COLUMNS": "200", "NO_COLOR": "1", "DOCKER_HOST": "tcp://127.0.0.1:9"}
    result = CliRunner().invoke(app, ["build", *filled], env=env)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("invalid_input: ") and said in result.output


def test_plugin_implies_services_and_builds_from_the_service_image_it_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tiny_package(tmp_path / "pkg")
    calls: list[tuple[str, Any]] = []

    async def tools(*args: Any, **kwargs: Any) -> dict[str, BuiltImage]:
        return {}

    async def service(*args: Any, **kwargs: Any) -> BuiltImage:
        calls.append(("service", None))
        return BuiltImage("brainhands/service:9.9", "sha256:s", skipped=True)

    async def plugins(sources: list[Path], **kwargs: Any) -> BuiltImage:
        calls.append(("plugins", (sources, kwargs["service"], kwargs["name"])))
        return BuiltImage(f"{kwargs['name']}:9.9", "sha256:p", skipped=False)

    monkeypatch.setattr(images_commands, "build_images", tools)
    monkeypatch.setattr(images_commands, "build_service_image", service)
    monkeypatch.setattr(images_commands, "build_plugin_image", plugins)
    args = ["build", "--plugin", str(package), "--service-image", "team/agent"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert calls == [
        ("service", None),
        ("plugins", ([package], "brainhands/service:9.9", "team/agent")),
    ]
    assert "2 images ready (1 built, 1 up to date)" in result.output


def test_a_conflict_is_said_by_pips_reason() -> None:
    stderr = (
        "ERROR: Cannot install brainhands==0.1.0 and plug==0.1.0 because these package "
        "versions have conflicting dependencies.\n"
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/...\n"
    )
    assert _conflict(stderr).startswith("ERROR: Cannot install brainhands==0.1.0 and plug")
