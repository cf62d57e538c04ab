"""What a call to the box can fail with."""
from __future__ import annotations

from typing import Optional


class BoxError(Exception):
    """The box refused a call (`{"error": {"code", "message"}}`, `status` its HTTP status), a job failed
    (`status` None, the job's own error code), or the box could not be reached (`code` `unreachable`)."""

    def __init__(self, code: str, message: str, status: Optional[int] = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


class ParameterError(BoxError, ValueError):
    """A job parameter refused here, before anything is sent, with the code the box would answer."""

    def __init__(self, code: str, message: str):
        super().__init__(code, message, None)
