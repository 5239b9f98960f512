"""Serve an ASGI app over real HTTP on a free loopback port, for the length of a test."""

from __future__ import annotations

from webapi.server import free_port, serving

__all__ = ["free_port", "serve"]
serve = serving
