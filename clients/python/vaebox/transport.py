"""HTTP to one box with urllib: the token, bounded answers, and the box's errors as BoxError."""
from __future__ import annotations

import http.client
import json
import select
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, BinaryIO, Dict, Mapping, Optional

from .errors import BoxError

# A job with its plan is a few KiB, a page of jobs under a megabyte; far above that is not a vaebox answer.
MAX_JSON_BYTES = 64 << 20
# Error bodies are one short JSON object; a proxy's HTML page is cut here.
MAX_ERROR_BYTES = 64 << 10
UPLOAD_CHUNK_BYTES = 1 << 20


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


    def upload(self, path: str, query: Mapping[str, str], file: Path) -> Any:
        """POSTs the file as a raw body. The box checks the query before it reads the body and may answer a
        refusal while the file is still going out (then closing the connection): the sending stops there and
        that answer is read, rather than reported as a broken pipe."""
        url = urllib.parse.urlsplit(self.url)
        connection_type = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        connection = connection_type(url.hostname, url.port, timeout=self.timeout_s)
        target = url.path + path + "?" + urllib.parse.urlencode(query)
        size = file.stat().st_size
        try:
            connection.putrequest("POST", target)
            connection.putheader("Content-Type", "application/octet-stream")
            connection.putheader("Content-Length", str(size))
            if self.token:
                connection.putheader("Authorization", f"Bearer {self.token}")
            connection.endheaders()
            cut_short = None
            with file.open("rb") as body:
                while True:
                    if select.select([connection.sock], [], [], 0)[0]:
                        break  # the box answered before the whole body arrived: a refusal
                    chunk = body.read(UPLOAD_CHUNK_BYTES)
                    if not chunk:
                        break
                    try:
                        connection.send(chunk)
                    except OSError as failure:  # closed under us; its answer may be waiting
                        cut_short = failure
                        break
            try:
                response = connection.getresponse()
            except OSError as failure:
                raise BoxError("unreachable", f"{self.url} did not answer the upload: {cut_short or failure}") from None
            data = response.read(MAX_JSON_BYTES + 1 if response.status < 400 else MAX_ERROR_BYTES)
            if response.status >= 400:
                raise box_error(response.status, response.reason, data)
            return json.loads(data)
        except OSError as failure:
            raise BoxError("unreachable", f"cannot reach {self.url}: {failure}") from None
        finally:
            connection.close()


def box_error(status: int, reason: str, body: bytes) -> BoxError:
    """`{"error": {"code", "message"}}` as the box sends it; anything else (a proxy's page) by its status."""
    try:
        error = json.loads(body)["error"]
        return BoxError(str(error["code"]), str(error["message"]), status)
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:200]
        return BoxError(f"http-{status}", f"{reason}{': ' + text if text else ''}", status)
