"""The web console: server-rendered pages over the Session API's own reads and actions.

Served by the Session API under ``/console`` with the API's tokens: a login form keeps
the token in an ``HttpOnly``, ``SameSite=Strict`` cookie (``webapi.auth.CookieLogin``);
every form that changes something — and the login form itself — carries a CSRF token
and is refused from another origin (``login``). Pages: the sessions (``pages``), one
session (its task graph, a paged timeline of commits, operations, questions, entries;
followed live through the session's event stream by ``static/console.js``), one
operation, and the fleet (for tokens not restricted to some sessions). Actions are the
API's own: cancel, answer or approve/deny a question, fork from a commit.
"""

from session_api.console.login import COOKIE
from session_api.console.pages import Brains, console_router

__all__ = ["COOKIE", "Brains", "console_router"]
