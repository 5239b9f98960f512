"""Open a Session Store by URL; heavy SDKs are imported only for the backend asked for.

==============================================  =========================================
URL                                             backend
==============================================  =========================================
``sqlite:///var/lib/bh/store.db``               SQLite file (embedded default)
``s3://bucket/prefix?endpoint_url=http://…``    S3-compatible (AWS S3, MinIO)
``dynamodb://table?endpoint_url=http://…``      DynamoDB (or a compatible API)
==============================================  =========================================

Query parameters for S3 and DynamoDB: ``endpoint_url``, ``region``. Credentials come
from the standard AWS environment (``AWS_ACCESS_KEY_ID``…), never from the URL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from contracts import InvalidStoreUrl
from session_store.backend import Backend
from session_store.settings import StoreSettings
from session_store.store import SessionStore

_SCHEMES = ("sqlite", "s3", "dynamodb")
_CLOUD_PARAMS = frozenset({"endpoint_url", "region"})


async def open_store(
    url: str, settings: StoreSettings | None = None, *, create: bool = False, **overrides: Any
) -> SessionStore:
    """Open the store at ``url`` and check that it can be used.

    ``create`` makes the bucket/table if missing (SQLite files are always created
    unless read-only). ``overrides`` are ``StoreSettings`` fields.
    """
    settings = (settings or StoreSettings()).model_copy(update=overrides)
    settings = StoreSettings.model_validate(settings.model_dump())
    backend = await open_backend(url, read_only=settings.read_only, create=create)
    try:
        return SessionStore(backend, settings)
    except BaseException:
        await backend.close()
        raise


async def open_backend(url: str, *, read_only: bool = False, create: bool = False) -> Backend:
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise InvalidStoreUrl(
            f"store URL {_redact(url)!r} has scheme {parts.scheme!r}; supported: "
            + ", ".join(f"{s}://" for s in _SCHEMES),
            url=_redact(url),
        )
    if parts.username or parts.password:
        raise InvalidStoreUrl(
            "store URLs must not carry credentials; use AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY in the environment",
            url=_redact(url),
        )
    params = _params(url, parts.query)
    if parts.scheme == "sqlite":
        return await _sqlite(url, parts.netloc, parts.path, params, read_only=read_only)
    return await _cloud(url, parts.scheme, parts.netloc, parts.path, params, read_only, create)


async def _sqlite(
    url: str, netloc: str, path: str, params: dict[str, str], *, read_only: bool
) -> Backend:
    from session_store.backends.sqlite import SqliteBackend

    if params:
        raise InvalidStoreUrl(f"sqlite store URLs take no parameters, got {sorted(params)}")
    if netloc or not path or path == "/":
        raise InvalidStoreUrl(
            f"store URL {url!r} names no file; write sqlite:///absolute/path/to/store.db",
            url=url,
        )
    backend = SqliteBackend(Path("/" + path.lstrip("/")), read_only=read_only)
    return await backend.open()


async def _cloud(
    url: str,
    scheme: str,
    name: str,
    path: str,
    params: dict[str, str],
    read_only: bool,
    create: bool,
) -> Backend:
    unknown = params.keys() - _CLOUD_PARAMS
    if unknown:
        raise InvalidStoreUrl(
            f"store URL has unknown parameter(s) {sorted(unknown)}; allowed: "
            f"{sorted(_CLOUD_PARAMS)}",
            url=_redact(url),
        )
    if not name:
        what = "bucket" if scheme == "s3" else "table"
        raise InvalidStoreUrl(f"store URL {_redact(url)!r} names no {what}", url=_redact(url))
    endpoint, region = params.get("endpoint_url"), params.get("region")
    backend: Backend
    if scheme == "s3":
        from session_store.backends.s3 import S3Backend

        backend = await S3Backend.connect(
            bucket=name, prefix=path.strip("/"), endpoint_url=endpoint, region=region
        )
    else:
        from session_store.backends.dynamodb import DynamoBackend

        if path.strip("/"):
            raise InvalidStoreUrl(f"dynamodb store URLs name a table only, not {path!r}")
        backend = await DynamoBackend.connect(table=name, endpoint_url=endpoint, region=region)
    try:
        if create and not read_only:
            await backend.ensure()
        await backend.check()
    except BaseException:
        await backend.close()
        raise
    return backend


def _params(url: str, query: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=False, strict_parsing=bool(query))
    except ValueError:
        raise InvalidStoreUrl(f"store URL {_redact(url)!r} has a malformed query") from None
    return dict(pairs)


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password or parts.username:
        return parts._replace(netloc=parts.hostname or "").geturl()
    return url
