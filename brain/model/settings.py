"""Settings of the OpenAI-compatible model client, read from the environment at entry points."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

from pydantic import Field, SecretStr, ValidationError, field_validator

from contracts.errors import InvalidInput
from contracts.model import Frozen
from contracts.usage import Prices
from runtime.credentials import read_secret


class ModelSettings(Frozen):
    """Where the model lives, how to authenticate, and how to ask it."""

    base_url: str = Field(min_length=1)
    api_key: SecretStr
    model: str = Field(min_length=1)
    timeout: timedelta = timedelta(seconds=60)
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    #: the answer's tokens a call is estimated at, when ``max_tokens`` does not bound
    #: them (``brain.model.estimate``: what a budget or a token limit holds for a call)
    output_estimate: int = Field(default=1024, gt=0)
    #: per million tokens; a response's cost is computed from them (None: no cost)
    prices: Prices | None = None
    #: ask for the answer as a stream of Server-Sent Events (``brain.model.stream``)
    stream: bool = False
    #: streamed text is saved as a preview at most once per this interval
    preview_interval: timedelta = timedelta(milliseconds=250)
    #: a preview keeps this many characters of the answer's text
    preview_chars: int = Field(default=8000, gt=0)
    #: limits of this endpoint across all Brains (``coordination.ratelimit``; None: none)
    requests_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)
    #: model requests one process keeps in flight at most (its HTTP connection pool);
    #: None: 100, and a Brain raises it to its slots (``brain serve --concurrency``)
    max_connections: int | None = Field(default=None, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {value!r}")
        return value

    @classmethod
    def from_env(
        cls, prefix: str = "BH_MODEL_", environ: Mapping[str, str] | None = None
    ) -> ModelSettings:
        """Read ``<prefix>BASE_URL``, ``<prefix>NAME`` and the key: from the file named by
        ``<prefix>API_KEY_FILE`` (a mounted secret, refused when others may read it) or
        else ``<prefix>API_KEY``; both set is refused (which one is meant?). Optional
        prices per million tokens: ``<prefix>PRICE_INPUT``, ``_OUTPUT``, ``_CACHED``; and
        limits across all Brains: ``<prefix>RPM`` (requests), ``<prefix>TPM`` (tokens)
        per minute; ``<prefix>MAX_CONNECTIONS``, requests in flight from one process;
        ``<prefix>OUTPUT_ESTIMATE`` (1024), the answer's tokens a call is held at before
        it is made when no ``max_tokens`` bounds them;
        ``<prefix>STREAM=1`` to stream answers, whose text is saved as a
        preview at most every ``<prefix>PREVIEW_MS`` (250) milliseconds, up to
        ``<prefix>PREVIEW_CHARS`` (8000) characters."""
        source = os.environ if environ is None else environ
        try:
            return cls(
                base_url=_require(source, f"{prefix}BASE_URL"),
                api_key=SecretStr(_key(source, prefix)),
                model=_require(source, f"{prefix}NAME"),
                prices=_prices(source, prefix),
                stream=source.get(f"{prefix}STREAM", "").strip().lower() in {"1", "true", "yes"},
                preview_interval=_millis(source, f"{prefix}PREVIEW_MS", 250),
                preview_chars=source.get(f"{prefix}PREVIEW_CHARS", "").strip() or 8000,
                requests_per_minute=source.get(f"{prefix}RPM", "").strip() or None,
                tokens_per_minute=source.get(f"{prefix}TPM", "").strip() or None,
                max_connections=source.get(f"{prefix}MAX_CONNECTIONS", "").strip() or None,
                output_estimate=source.get(f"{prefix}OUTPUT_ESTIMATE", "").strip() or 1024,
            )
        except ValidationError as exc:
            problems = "; ".join(str(error["msg"]) for error in exc.errors())
            raise InvalidInput(f"model settings from {prefix}* are invalid: {problems}") from None


def _millis(environ: Mapping[str, str], name: str, default: float) -> timedelta:
    text = environ.get(name, "").strip()
    try:
        millis = float(text) if text else default
    except ValueError:
        raise InvalidInput(f"{name} must be a number of milliseconds, got {text!r}") from None
    if not millis > 0:
        raise InvalidInput(f"{name} must be more than 0, got {text!r}")
    return timedelta(milliseconds=millis)


def _prices(environ: Mapping[str, str], prefix: str) -> Prices | None:
    """``<prefix>PRICE_INPUT``, ``_OUTPUT`` and ``_CACHED`` (per million tokens)."""
    given = {
        part: environ.get(f"{prefix}PRICE_{part.upper()}", "").strip()
        for part in ("input", "output", "cached")
    }
    if not any(given.values()):
        return None
    return Prices.model_validate({part: value for part, value in given.items() if value})


def _require(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise InvalidInput(f"environment variable {name} is not set (the model client needs it)")
    return value


def _key(environ: Mapping[str, str], prefix: str) -> str:
    path = environ.get(f"{prefix}API_KEY_FILE", "").strip()
    if path and environ.get(f"{prefix}API_KEY", "").strip():
        raise InvalidInput(
            f"both {prefix}API_KEY and {prefix}API_KEY_FILE are set: set one (the file is "
            "the one to prefer: it keeps the key out of the environment)"
        )
    if path:
        return read_secret(Path(path))
    return _require(environ, f"{prefix}API_KEY")
