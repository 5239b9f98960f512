"""The dev stack's one error: something the developer must fix, worded to be shown as-is.

Dev tooling, not the runtime: these never cross the wire, so they stay out of
``contracts/errors.py``.
"""


class DevstackError(Exception):
    """A problem the developer can act on: missing binary, busy port, not root, bad setting.

    The message says what is wrong and what to do about it; the CLI prints it without a
    traceback.
    """
