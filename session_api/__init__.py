"""The Session API: clients submit input to sessions, cancel it, and watch sessions run.

``session_api.app.create_app`` builds the ASGI app from a store and a wake queue;
``session_api.server`` serves it (``python -m session_api``). The wire models are in
``session_api.views`` (importing them does not import the web framework), shared with
the client ``bh.session_client``. See ``docs/session-api.md``.
"""
