"""``python -m session_api``: serve the Session API (see ``session_api.server``)."""

from session_api.server import main

main()
