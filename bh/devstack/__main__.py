"""``python -m bh.devstack``: the ``bh dev`` commands without the rest of the CLI."""

from bh.devstack import app

app(prog_name="bh dev")
