"""HTTP to one box with urllib: the token, bounded answers, and the box's errors as BoxError."""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, BinaryIO, Dict, Mapping, Optional

from .errors import BoxError

# A job with its plan is a few KiB, a page of jobs under a megabyte; far above that is not a vaebox answer.
MAX_JSON_BYTES = 64 << 20
# Error bodies are one short JSON object; a proxy's HTML page is cut here.
MAX_ERROR_BYTES = 64 << 10


class Transport:
    def __init__(self, url: str, token: Optional[str] = None, timeout_s: float = 60.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the box's URL starts with http:// or https://, not {url!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def open(self, method: str, path: str, query: Optional[Mapping[str, str]] = None, body: Optional[BinaryIO] = None,
             headers: Optional[Dict[str, str]] = None, timeout_s: Optional[float] = None, allow: tuple = ()):
        """The open response (the caller reads and closes it). An error status in `allow` is returned as
        the response too; any other becomes a BoxError."""
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            return urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s)
        except urllib.error.HTTPError as answer:
            if answer.code in allow:
                return answer
            with answer:
                raise box_error(answer.code, answer.reason, answer.read(MAX_ERROR_BYTES)) from None
        except urllib.error.URLError as failure:
            raise BoxError("unreachable", f"cannot reach {self.url}: {failure.reason}") from None
        except OSError as failure:  # a timeout or reset before the answer's head
            raise BoxError("unreachable", f"cannot reach {self.url}: {failure}") from None

    def json(self, method: str, path: str, query: Optional[Mapping[str, str]] = None, body: Optional[BinaryIO] = None,
             headers: Optional[Dict[str, str]] = None) -> Any:
        with self.open(method, path, query, body, headers) as response:
            data = response.read(MAX_JSON_BYTES + 1)
        if len(data) > MAX_JSON_BYTES:
            raise BoxError("answer-too-large", f"{method} {path}: the answer is over {MAX_JSON_BYTES} bytes")
        return json.loads(data) if data else None


def box_error(status: int, reason: str, body: bytes) -> BoxError:
    """`{"error": {"code", "message"}}` as the box sends it; anything else (a proxy's page) by its status."""
    try:
        error = json.loads(body)["error"]
        return BoxError(str(error["code"]), str(error["message"]), status)
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:200]
        return BoxError(f"http-{status}", f"{reason}{': ' + text if text else ''}", status)
