"""The Hands HTTP API: operations (status, result, logs; list, cancel, verify), the tool
registry (register an image, list, inspect), health and metrics.

``hands.api.app.create_app`` builds the ASGI app from a store, an executor, a sandbox
and (optionally) a bus; ``hands.api_server`` serves it. The wire models are in
``hands.api.views`` (importing them does not import the web framework). See
``docs/hands-api.md``.
"""
