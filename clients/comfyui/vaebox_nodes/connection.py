"""The connection to a box: its URL and token, JSON calls and bounded downloads through urllib."""
import json
import socket
import urllib.error
import urllib.parse
import urllib.request

from .errors import VaeboxError

DEFAULT_URL = "http://127.0.0.1:8080"
# JSON answers (a job, the model list) are small; a bigger one is not the box talking.
MAX_JSON_BYTES = 16 << 20
# Results are read into memory for ComfyUI's tensors anyway; this bounds a runaway answer.
MAX_RESULT_BYTES = 16 << 30
CHUNK_BYTES = 1 << 20


def read_bounded(response, limit):
    """The whole body, refusing one over `limit` bytes (declared or received)."""
    declared = response.headers.get("Content-Length")
    if declared is not None and int(declared) > limit:
        raise VaeboxError("answer-too-large", f"the answer has {declared} bytes, over the {limit} this client reads")
    parts, received = [], 0
    while True:
        part = response.read(CHUNK_BYTES)
        if not part:
            return b"".join(parts)
        received += len(part)
        if received > limit:
            raise VaeboxError("answer-too-large", f"the answer is over the {limit} bytes this client reads")
        parts.append(part)


def hang_up(link):
    """Closes the socket under a request in flight on another thread (closing alone would wait for its read)."""
    sock = link.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def error_from_body(status, body, url):
    """The box's `{"error": {"code", "message"}}`, or the raw text when it is something else (a proxy's page)."""
    try:
        error = json.loads(body.decode("utf-8"))["error"]
        return VaeboxError(error["code"], error["message"], status, url, error.get("job"))
    except (ValueError, KeyError, TypeError):
        text = body[:500].decode("utf-8", "replace").strip()
        return VaeboxError(f"http-{status}", text or "no error body", status, url)


class Connection:
    """What the 'vaebox connection' node hands the other nodes."""

    def __init__(self, url=DEFAULT_URL, token="", timeout=60.0):
        url = (url or DEFAULT_URL).strip().rstrip("/")
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"the box URL must start with http:// or https://, got {url!r}")
        self.url = url
        self.token = (token or "").strip()
        # Per socket operation: a box that stops answering is given up on, a long job is not (it is followed
        # by its event stream, whose reads have their own bound, or polled).
        self.timeout = timeout

    def __repr__(self):
        return f"Connection({self.url!r}, token={'set' if self.token else 'none'})"

    def headers(self, extra=None):
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        headers.update(extra or {})
        return headers

    def address(self, path, query=None):
        if query:
            path += "?" + urllib.parse.urlencode(query, doseq=True)
        return self.url + path

    def request(self, method, path, query=None, body=None, headers=None, limit=MAX_JSON_BYTES, timeout=None):
        """(status, headers, body bytes) of a 2xx answer; a refusal raises VaeboxError with the box's code."""
        request = urllib.request.Request(self.address(path, query), data=body, method=method, headers=self.headers(headers))
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                return response.status, response.headers, read_bounded(response, limit)
        except urllib.error.HTTPError as refusal:
            with refusal:
                raise error_from_body(refusal.code, read_bounded(refusal, MAX_JSON_BYTES), self.url) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise VaeboxError("unreachable", f"cannot reach {self.url}: {reason}", None, self.url) from None

    def json(self, method, path, query=None, body=None, headers=None, timeout=None):
        _, _, raw = self.request(method, path, query, body, headers, MAX_JSON_BYTES, timeout)
        return json.loads(raw.decode("utf-8"))

    def models(self, timeout=None):
        """GET /v1/models: the box's models, each with its `ops` and `scales`."""
        return self.json("GET", "/v1/models", timeout=timeout)["models"]
