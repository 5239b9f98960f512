"""The coding-assistant example: a package written, tested, fixed and tested again in the
session's workspace, durably (``docs/workspaces.md``)."""
