"""Adapters: agents and graphs built with other frameworks, run durably on brainhands.

This is the top floor of the project. An adapter translates a framework's native state
(its checkpoints, messages, tool calls, interrupts) into the store's vocabulary (fenced
commits, documents, blobs, entries) and may depend on ``brain``, ``session_store`` and
``contracts``; nothing else in the project imports ``adapters``
(``tests/unit/test_module_boundaries.py``). Each adapter is a subpackage whose framework
comes from an optional extra (``pip install -e '.[langgraph]'``), so importing
brainhands without the extra never imports the framework.
"""
