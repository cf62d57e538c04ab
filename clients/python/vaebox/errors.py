"""What a call to the box can fail with."""
from __future__ import annotations

from typing import Optional


class BoxError(Exception):
    """The box refused a call (`{"error": {"code", "message"}}`, `status` its HTTP status), a job failed
    (`status` None, the job's own error code), or the box could not be reached (`code` `unreachable`). Every
    failure of a call is one of these (MalformedAnswer, ParameterError), never a KeyError or a JSON error."""

    def __init__(self, code: str, message: str, status: Optional[int] = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class MalformedAnswer(BoxError):
    """An answer that is not what the box sends (code `bad-answer`): not JSON, JSON of another shape (a missing
    field, a field of the wrong type), or a body cut short. `status` is its HTTP status. A proxy or another
    program on the box's address gives these; the client names them rather than failing on a KeyError."""

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__("bad-answer", message, status)


class ParameterError(BoxError, ValueError):
    """A job parameter refused here, before anything is sent, with the code the box would answer."""

    def __init__(self, code: str, message: str):
        super().__init__(code, message, None)
