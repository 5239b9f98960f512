"""Logging in to the web console as a browser does: its form's CSRF cookie and field
first, then the post (``session_api.console.login``)."""

from __future__ import annotations

import re

import httpx


async def log_in(client: httpx.AsyncClient, token: str, **headers: str) -> httpx.Response:
    """Fetch the login form (its CSRF cookie and field), then post it."""
    form = await client.get("/console/login")
    logged = await client.post(
        "/console/login", data={"token": token, "csrf": csrf_of(form.text)}, headers=headers
    )
    assert logged.status_code == 303, logged.text
    assert logged.headers["location"] == "/console/sessions"
    cookie = console_cookie(logged)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    return logged


def console_cookie(response: httpx.Response) -> str:
    (cookie,) = [c for c in response.headers.get_list("set-cookie") if c.startswith("bh_console=")]
    return cookie


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    assert found is not None, "no CSRF token on the page"
    return found.group(1)
