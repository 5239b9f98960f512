"""LangGraph on brainhands: a checkpointer that keeps a compiled graph's checkpoints in
the Session Store (``docs/adapters.md``, "LangGraph: checkpoints in the Session Store").

Needs the ``langgraph`` extra. Importing this package says, in one log line, when the
installed framework differs from the versions the adapter was built and tested against.
"""

from __future__ import annotations

from adapters.langgraph.journal import Journal, SessionJournal
from adapters.langgraph.saver import BrainhandsSaver
from adapters.langgraph.version import PINS, check_versions

check_versions()

__all__ = ["PINS", "BrainhandsSaver", "Journal", "SessionJournal", "check_versions"]
