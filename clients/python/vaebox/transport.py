"""HTTP to one box with urllib: the token (never sent on to another host), bounded answers, and the box's
errors as BoxError (an answer that is not the box's: MalformedAnswer)."""
from __future__ import annotations

import http.client
import json
import select
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, BinaryIO, Dict, Mapping, Optional

from .answers import parse
from .errors import BoxError, MalformedAnswer

# A job with its plan is a few KiB, a page of jobs under a megabyte; far above that is not a vaebox answer.
MAX_JSON_BYTES = 64 << 20
# Error bodies are one short JSON object; a proxy's HTML page is cut here.
MAX_ERROR_BYTES = 64 << 10
UPLOAD_CHUNK_BYTES = 1 << 20


def origin(url: str):
    """(scheme, host, port) of a URL: what must stay the same for the token to go along."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


class TokenStaysWithItsHost(urllib.request.HTTPRedirectHandler):
    """Follows redirects as urllib does, without the `Authorization` header once the redirect leaves the box's
    scheme, host and port (as browsers and `requests` do): a proxy sending `/result` to storage elsewhere must
    not hand that host the box's token. Once dropped it stays dropped, even on a redirect back."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        follow = super().redirect_request(req, fp, code, msg, headers, newurl)
        if follow is not None and origin(newurl) != origin(req.full_url):
            follow.remove_header("Authorization")
        return follow



class Transport:
    def __init__(self, url: str, token: Optional[str] = None, timeout_s: float = 60.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the box's URL starts with http:// or https://, not {url!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.opener = urllib.request.build_opener(TokenStaysWithItsHost())

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
            return self.opener.open(request, timeout=timeout_s or self.timeout_s)
        except urllib.error.HTTPError as answer:
            if answer.code in allow:
                return answer
            with answer:
                raise box_error(answer.code, answer.reason, read_answer(answer, MAX_ERROR_BYTES, f"{method} {path}", self.url)) from None
        except http.client.HTTPException as failure:
            if isinstance(failure, OSError):  # RemoteDisconnected: closed without an answer (a box restarting)
                raise BoxError("unreachable", f"cannot reach {self.url}: {failure}") from None
            raise MalformedAnswer(f"{method} {path}: the answer is not HTTP ({failure!r})") from None
        except urllib.error.URLError as failure:
            raise BoxError("unreachable", f"cannot reach {self.url}: {failure.reason}") from None
        except OSError as failure:  # a timeout or reset before the answer's head
            raise BoxError("unreachable", f"cannot reach {self.url}: {failure}") from None

    def json(self, method: str, path: str, query: Optional[Mapping[str, str]] = None, body: Optional[BinaryIO] = None,
             headers: Optional[Dict[str, str]] = None) -> Any:
        with self.open(method, path, query, body, headers) as response:
            data = read_answer(response, MAX_JSON_BYTES, f"{method} {path}", self.url)
        if len(data) > MAX_JSON_BYTES:
            raise BoxError("answer-too-large", f"{method} {path}: the answer is over {MAX_JSON_BYTES} bytes")
        return parse(data, f"{method} {path}", response.status) if data else None


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
            except http.client.HTTPException as failure:
                if isinstance(failure, OSError):  # RemoteDisconnected: no answer at all
                    raise BoxError("unreachable", f"{self.url} did not answer the upload: {cut_short or failure}") from None
                raise MalformedAnswer(f"POST {path}: the answer is not HTTP ({failure!r})") from None
            except OSError as failure:
                raise BoxError("unreachable", f"{self.url} did not answer the upload: {cut_short or failure}") from None
            data = read_answer(response, MAX_JSON_BYTES if response.status < 400 else MAX_ERROR_BYTES, f"POST {path}", self.url)
            if response.status >= 400:
                raise box_error(response.status, response.reason, data)
            return parse(data, f"POST {path}", response.status)
        except OSError as failure:
            raise BoxError("unreachable", f"cannot reach {self.url}: {failure}") from None
        finally:
            connection.close()


def read_answer(response, limit: int, what: str, url: str) -> bytes:
    """Up to `limit + 1` bytes of the body; a body cut short (fewer bytes than its Content-Length, or a broken
    chunk) is a MalformedAnswer, a connection lost while reading `unreachable`."""
    try:
        data = response.read(limit + 1)
        declared = response.headers.get("Content-Length")
        # http.client hands back fewer bytes than asked when the body ends early, without a word: a JSON cut at
        # a place where it still parses would go unnoticed.
        if declared is not None and declared.strip().isdigit() and len(data) < min(int(declared), limit + 1):
            raise MalformedAnswer(f"{what}: the answer was cut short: {len(data)} of its {declared} bytes", response.status)
        return data
    except http.client.IncompleteRead as cut:
        raise MalformedAnswer(f"{what}: the answer was cut short after {len(cut.partial)} bytes", response.status) from None
    except http.client.HTTPException as failure:
        raise MalformedAnswer(f"{what}: the answer cannot be read as HTTP ({failure!r})", response.status) from None
    except OSError as failure:
        raise BoxError("unreachable", f"{url} stopped answering {what}: {failure}") from None


def box_error(status: int, reason: str, body: bytes) -> BoxError:
    """`{"error": {"code", "message"}}` as the box sends it; anything else (a proxy's page) by its status."""
    try:
        error = json.loads(body)["error"]
        return BoxError(str(error["code"]), str(error["message"]), status)
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:200]
        return BoxError(f"http-{status}", f"{reason}{': ' + text if text else ''}", status)
