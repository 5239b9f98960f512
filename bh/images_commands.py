"""``bh images``: build the tool images offline and list what the engine holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table

from bh import terminal
from bh.service_image import build_service_image
from contracts import BrainhandsError
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
    docker_host: DockerHost = None,
) -> None:
    """Build the base and tool images; images already up to date are skipped."""
    started = time.monotonic()
    built = _run(build_images(docker_host, names=names or None, base=base, say=console.print))
    if services:
        service = _run(build_service_image(docker_host, say=console.print))
        built[service.tag] = service
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


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    try:
        return asyncio.run(coroutine)
    except BrainhandsError as error:
        console.print(f"[red]{error.code}[/]: {error.message}")
        raise typer.Exit(2) from None
