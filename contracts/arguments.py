"""Checking a tool call's arguments against the tool's JSON Schema, the same way in the
Brain (before an intent is committed) and in the Hands (before anything runs)."""

from __future__ import annotations

from typing import Any

import jsonschema

from contracts.errors import ErrorInfo


def argument_problem(tool: str, schema: dict[str, Any], arguments: Any) -> ErrorInfo | None:
    """None when ``arguments`` fit ``schema``; else what is wrong and where (the field's
    path in ``details["field"]``), for the first problem in path order."""
    if not isinstance(arguments, dict):
        return ErrorInfo(
            code="invalid_input",
            message=f"arguments of {tool!r} must be a JSON object",
            details={"field": "(top level)", "problems": 1},
        )
    validator = jsonschema.Draft202012Validator(schema)
    problems = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if not problems:
        return None
    first = problems[0]
    where = "/".join(str(part) for part in first.absolute_path) or "(top level)"
    return ErrorInfo(
        code="invalid_input",
        message=f"arguments of {tool!r} are invalid at {where}: {first.message}",
        details={"field": where, "problems": len(problems)},
    )
