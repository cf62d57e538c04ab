"""Server-Sent Events as `GET /v1/jobs/{id}/events` sends them: (event, data) pairs."""
from __future__ import annotations

from typing import BinaryIO, Iterator, Tuple

from .errors import BoxError, MalformedAnswer

# One event's data is one job as JSON (a few KiB with its plan).
MAX_LINE_BYTES = 16 << 20


def events(stream: BinaryIO) -> Iterator[Tuple[str, str]]:
    """Each event of the stream until it ends; keep-alive comments (`:`) are skipped."""
    name, data = "message", []
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES:
            raise BoxError("answer-too-large", f"an event line is over {MAX_LINE_BYTES} bytes")
        try:
            text = line.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise MalformedAnswer(f"an event line is not UTF-8: {line[:60]!r}") from None
        if not text:
            if data:
                yield name, "\n".join(data)
            name, data = "message", []
        elif text.startswith(":"):
            continue
        else:
            field, _, value = text.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
