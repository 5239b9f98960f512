"""The Session Store: atomic, fenced, totally ordered commit logs on SQLite, S3 and DynamoDB."""

from session_store.factory import open_backend, open_store
from session_store.handle import SessionHandle
from session_store.settings import StoreSettings
from session_store.state import SessionState
from session_store.store import SessionStore

__all__ = [
    "SessionHandle",
    "SessionState",
    "SessionStore",
    "StoreSettings",
    "open_backend",
    "open_store",
]
