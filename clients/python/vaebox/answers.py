"""The box's answers checked against the shapes its document gives them (the TypedDicts of `_generated`), so that
a proxy's page, a truncated body or another program on the box's address fails as `MalformedAnswer` at the call,
not as a KeyError or TypeError somewhere in the caller's code."""
from __future__ import annotations

import json
import typing
from typing import Any, Dict, Optional

from .errors import MalformedAnswer

_hints: Dict[type, Dict[str, Any]] = {}


def parse(data: bytes, what: str, status: Optional[int] = None) -> Any:
    """The JSON of an answer's body (`what`: `GET /v1/jobs/ID`, for the message)."""
    try:
        return json.loads(data)
    except ValueError:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not UTF-8
        shown = data[:80].decode("utf-8", "replace")
        raise MalformedAnswer(f"{what}: the answer is not JSON ({len(data)} bytes: {shown!r})", status) from None


def checked(value: Any, shape: Any, what: str, status: Optional[int] = None) -> Any:
    """`value` itself when it has `shape` (a generated TypedDict, or a typing form of them); else MalformedAnswer
    naming the first field that differs."""
    problem = _problem(value, shape, "")
    if problem is not None:
        raise MalformedAnswer(f"{what}: the answer is not the box's {_name(shape)}: {problem}", status)
    return value


def _name(shape: Any) -> str:
    return getattr(shape, "__name__", None) or str(shape).replace("typing.", "")


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{text[:60]}… ({type(value).__name__})" if len(text) > 60 else f"{text} ({type(value).__name__})"


def _problem(value: Any, shape: Any, where: str) -> Optional[str]:
    """Why `value` does not have `shape`; None when it does. Only types are checked: a status or op this client
    does not know yet is a newer box's, and passes."""
    at = f"`{where}` is " if where else ""
    origin, args = typing.get_origin(shape), typing.get_args(shape)
    if shape is Any:
        return None
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        problems = [_problem(value, option, where) for option in args if option is not type(None)]
        return None if None in problems else problems[0]
    if origin is typing.Literal:
        kinds = tuple({type(option) for option in args})
        return None if isinstance(value, kinds) else f"{at}{_describe(value)}, not a {kinds[0].__name__}"
    if origin is list:
        if not isinstance(value, list):
            return f"{at}{_describe(value)}, not a list"
        return next((p for i, item in enumerate(value) if (p := _problem(item, args[0], f"{where}[{i}]")) is not None), None)
    if origin is dict:
        if not isinstance(value, dict):
            return f"{at}{_describe(value)}, not an object"
        return next((p for key, item in value.items() if (p := _problem(item, args[1], f"{where}.{key}".lstrip("."))) is not None), None)
    if isinstance(shape, type) and issubclass(shape, dict) and hasattr(shape, "__required_keys__"):
        if not isinstance(value, dict):
            return f"{at}{_describe(value)}, not an object"
        missing = sorted(key for key in shape.__required_keys__ if key not in value)
        if missing:
            return f"`{where + '.' if where else ''}{missing[0]}` is missing"
        hints = _hints.get(shape)
        if hints is None:
            hints = _hints[shape] = typing.get_type_hints(shape)
        for key, hint in hints.items():
            if key in value:
                problem = _problem(value[key], hint, f"{where}.{key}".lstrip("."))
                if problem is not None:
                    return problem
        return None
    if shape is bool:
        return None if isinstance(value, bool) else f"{at}{_describe(value)}, not true or false"
    if shape is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else f"{at}{_describe(value)}, not an integer"
    if shape is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else f"{at}{_describe(value)}, not a number"
    if shape is str:
        return None if isinstance(value, str) else f"{at}{_describe(value)}, not a string"
    return None  # a form the document does not use
