"""The message bus both services meet on: NATS JetStream streams, subjects and publishing.

Below ``brain``, ``hands`` and ``scheduler`` (like ``session_store``); it carries
``contracts`` wire models and translates nats-py errors into the project's error tree.
The bus is a hint, never the truth: the store holds every intent and result, and
anything the bus loses is re-published from there.
"""

from bus.jetstream import (
    CANCEL_SUBJECT,
    DISPATCH_STREAM,
    DISPATCH_SUBJECTS,
    RESULTS_STREAM,
    Bus,
    BusSettings,
    dispatch_subject,
    result_subject,
)

__all__ = [
    "CANCEL_SUBJECT",
    "DISPATCH_STREAM",
    "DISPATCH_SUBJECTS",
    "RESULTS_STREAM",
    "Bus",
    "BusSettings",
    "dispatch_subject",
    "result_subject",
]
