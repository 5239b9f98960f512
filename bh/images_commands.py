"""``bh images``: build the tool images offline and list what the engine holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table

from bh import terminal
from bh.plugin_image import PLUGINS_REPOSITORY, build_plugin_image, plugin_sources, plugins_name
from bh.service_image import build_service_image
from contracts import BrainhandsError, InvalidInput
from hands.images import build_images, list_images, tool_directories

app = typer.Typer(help="Build and list sandboxed tool images.", no_args_is_help=True)
console = terminal.console()

_T = TypeVar("_T")

DockerHost = Annotated[
    str | None,
    typer.Option(
        "--docker-host",
        envvar="DOCKER_HOST",
        help="Docker engine URL (default: the local socket).",
        show_envvar=True,
    ),
]


@app.command()
def build(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="NAME",
            help=f"Tools to build (default: all of {', '.join(tool_directories())}).",
            show_default=False,
        ),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option(
            metavar="IMAGE",
            help="Build FROM this image (e.g. python:3.12-slim) instead of the offline "
            "Debian base, which is built with debootstrap when missing.",
        ),
    ] = None,
    services: Annotated[
        bool,
        typer.Option(
            "--services",
            help="Also build the brainhands service image (every role; from a wheelhouse, "
            "no index inside the build).",
        ),
    ] = False,
    plugins: Annotated[
        list[Path] | None,
        typer.Option(
            "--plugin",
            metavar="PATH",
            help="Your own agent code: a directory with a pyproject.toml, installed into a "
            "derived service image (repeatable; implies --services). Its dependencies the "
            "service image lacks are downloaded on the host; the build reaches no index.",
            show_default=False,
        ),
    ] = None,
    service_image: Annotated[
        str | None,
        typer.Option(
            "--service-image",
            metavar="NAME",
            help="Repository of the image with the --plugin packages, tagged :<version> and "
            f":latest (default: {PLUGINS_REPOSITORY}).",
            show_default=False,
        ),
    ] = None,
    docker_host: DockerHost = None,
) -> None:
    """Build the base and tool images; images already up to date are skipped."""
    started = time.monotonic()
    sources, name = _checked(lambda: _plugin_arguments(plugins or [], service_image))
    built = _run(build_images(docker_host, names=names or None, base=base, say=console.print))
    if services or sources:
        service = _run(build_service_image(docker_host, say=console.print))
        built[service.tag] = service
    if sources:
        derived = _run(
            build_plugin_image(
                sources, service=service.tag, name=name, docker_host=docker_host, say=console.print
            )
        )
        built[derived.tag] = derived
    fresh = sum(not image.skipped for image in built.values())
    console.print(
        f"{len(built)} images ready ({fresh} built, {len(built) - fresh} up to date) "
        f"in {time.monotonic() - started:.1f} s"
    )


@app.command(name="list")
def list_(docker_host: DockerHost = None) -> None:
    """List brainhands images: tag, id, size and the tool they declare."""
    table = Table()
    table.add_column("tag", no_wrap=True)
    for column in ("id", "size", "tool"):
        table.add_column(column)
    for image in _run(list_images(docker_host)):
        size = f"{image.size / 2**20:.1f} MiB"
        short_id = image.image_id.removeprefix("sha256:")[:12]
        table.add_row(image.tag, short_id, size, image.tool)
    console.print(table)


def _plugin_arguments(plugins: list[Path], service_image: str | None) -> tuple[list[Path], str]:
    if service_image is not None and not plugins:
        raise InvalidInput(
            "--service-image names the image of the --plugin packages: give --plugin"
        )
    return plugin_sources(plugins), plugins_name(service_image or PLUGINS_REPOSITORY)


def _checked(check: Callable[[], _T]) -> _T:
    try:
        return check()
    except BrainhandsError as error:
        console.print(f"[red]{error.code}[/]: {error.message}")
        raise typer.Exit(2) from None


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    return _checked(lambda: asyncio.run(coroutine))
