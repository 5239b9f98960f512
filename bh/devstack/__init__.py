"""Local dev infrastructure: one idempotent command starts and stops the services.

Mounted as ``bh dev`` (``cli.add_typer(devstack.app, name="dev")``); also runnable as
``python -m bh.devstack``.
"""

from bh.devstack.commands import app

__all__ = ["app"]
