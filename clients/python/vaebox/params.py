"""A submission's fields checked against the box's document (`_generated.PARAMETERS`) before any byte
is sent: a misspelt name fails here, with the code and the suggestion the box would give."""
from __future__ import annotations

import difflib
from typing import Any, Dict, Mapping, Optional

from ._generated import OPS, PARAMETERS
from .errors import ParameterError

# Set by the client from the uploaded file, never by the caller.
SET_BY_CLIENT = ("filename",)


def job_query(op: Optional[str], params: Mapping[str, Any]) -> Dict[str, str]:
    """The query string of a raw upload: `op` (None: the box's default or the preset's) and `params`,
    checked by name and op, values as the box reads them (`true`/`false`); None values are left out."""
    if op is not None and op not in OPS:
        raise ParameterError("unknown-op", f"unknown op `{op}`{suggestion(op, OPS)}; the ops: {', '.join(OPS)}")
    query = {} if op is None else {"op": op}
    for name, value in params.items():
        parameter = PARAMETERS.get(name)
        if parameter is None or name == "op" or name in SET_BY_CLIENT:
            known = [n for n in PARAMETERS if n != "op" and n not in SET_BY_CLIENT]
            why = " (the client names the upload after its file)" if name in SET_BY_CLIENT else suggestion(name, known)
            raise ParameterError("unknown-parameter", f"unknown parameter `{name}`{why}")
        if op is not None and op not in parameter.ops:
            raise ParameterError("parameter-not-for-op", f"`{name}` is not a parameter of {op} (it is for {', '.join(parameter.ops)})")
        if value is None:
            continue
        query[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return query


def suggestion(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean `{close[0]}`?" if close else ""
