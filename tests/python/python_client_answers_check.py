"""The Python client (clients/python) behind a proxy in front of a real box, driven by tests/it/python_client.rs.

usage: python_client_answers_check.py BASE_URL TOKEN JOB_ID SCRATCH_DIR
  JOB_ID  a succeeded job of the box (its result is what the downloads fetch)

The proxy (http.server, here) passes requests on to the box, and under a path prefix changes one thing:
  /elsewhere   `/result` redirects to another host (a storage server here, another port), which records the
               Authorization it is sent and serves the result's bytes
  /same        `/result` redirects to `/pass/...` on the proxy itself: the box still needs the token there
  /pass        everything passed on as it is
  /endless     `/result` sends the result's bytes and then more, with no Content-Length
  /overdeclared  `/result` declares (and sends) more bytes than the job's result has
  /nonjson, /wrongtype, /missing, /wrongfield, /truncated, /notutf8   each JSON answer malformed that way
  /badevent    the event stream's job is not JSON
Prints one JSON object: what each call raised or returned.
"""
import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

base, token, job_id, scratch = sys.argv[1:5]
scratch = Path(scratch)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients/python"))
import vaebox  # noqa: E402

MALFORMED = ("nonjson", "wrongtype", "missing", "wrongfield", "truncated", "notutf8")
storage_seen = []


def from_box(method, path, headers, body=None):
    """(status, headers, body) of the box's answer to the request as it came."""
    request = urllib.request.Request(base + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as refusal:
        return refusal.code, dict(refusal.headers), refusal.read()


def malformed(mode, body):
    """The box's JSON `body` made wrong the way `mode` says; (body bytes, declared length or None)."""
    value = json.loads(body)
    if mode == "nonjson":
        return b"<html><body>502 Bad Gateway</body></html>", None
    if mode == "wrongtype":
        return b'["not", "an", "object"]', None
    if mode == "notutf8":
        return b'{"id": "\xff\xfe"}', None
    if mode == "truncated":
        return body[: len(body) // 2], len(body)
    target = value["jobs"][0] if "jobs" in value else value["models"][0] if "models" in value else value
    if mode == "missing":
        for key in ("status", "name", "presets"):
            target.pop(key, None)
    elif mode == "wrongfield":
        if "status" in target:
            target["status"] = 3
            if isinstance(target.get("output"), dict):
                target["output"]["bytes"] = "many"
        if "scales" in target:
            target["scales"] = "x2"
        if "presets" in target:
            target["presets"] = ["anime-2x"]
    return json.dumps(value).encode(), None


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, headers, body, declared=None, close=False):
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() in ("content-type", "content-range", "accept-ranges", "location"):
                self.send_header(name, value)
        if declared is not None or not close:
            self.send_header("Content-Length", str(declared if declared is not None else len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        try:
            self.wfile.write(body)
            self.wfile.flush()
        except ConnectionError:
            self.close_connection = True  # the client stopped reading (the endless answer): what it should do
        if declared is not None and declared > len(body):
            self.close_connection = True  # cut short: the client sees fewer bytes than declared

    def do_GET(self):
        self.pass_on("GET")

    def do_POST(self):
        self.pass_on("POST")

    def pass_on(self, method):
        _, mode, rest = self.path.split("/", 2)
        path = "/" + rest
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "range", "content-type", "accept")}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        is_result = path.split("?")[0].endswith("/result")
        if mode == "elsewhere" and is_result:
            return self.answer(302, {"Location": f"{storage_url}/results{path}"}, b"")
        if mode == "same" and is_result:
            return self.answer(307, {"Location": f"/pass{path}"}, b"")
        if mode == "badevent" and path.split("?")[0].endswith("/events"):
            return self.answer(200, {"Content-Type": "text/event-stream"}, b"event: job\ndata: {not json\n\n", close=True)
        status, answer_headers, answer = from_box(method, path, headers, body)
        if mode == "endless" and is_result:
            return self.answer(status, answer_headers, answer + b"\0" * (4 << 20), close=True)
        if mode == "overdeclared" and is_result:
            return self.answer(status, answer_headers, answer + b"\0" * 100)
        if mode in MALFORMED and status == 200 and not is_result:
            answer, declared = malformed(mode, answer)
            return self.answer(status, {"Content-Type": "application/json"}, answer, declared)
        self.answer(status, answer_headers, answer)


class Storage(http.server.BaseHTTPRequestHandler):
    """Another host: records the Authorization it is sent, and serves results it fetches with its own access."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        storage_seen.append(self.headers.get("Authorization"))
        status, _, body = from_box("GET", self.path[len("/results"):], {"Authorization": f"Bearer {token}"})
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve(handler):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


proxy_url, storage_url = serve(Proxy), serve(Storage)
out = {}


def outcome(call):
    """`returned`, or `ClassName code: message` of what it raised (a traceback's last line for anything else)."""
    try:
        call()
        return "returned"
    except vaebox.BoxError as e:
        return f"{type(e).__name__} {e.code}: {e.message}"
    except Exception as e:  # what the client must not let through
        return f"raw {type(e).__name__}: {e}"


expected = from_box("GET", f"/v1/jobs/{job_id}/result", {"Authorization": f"Bearer {token}"})[2]

# Redirects: the token stays with the box's host, and goes along on a redirect that stays there.
folder = scratch / "elsewhere"
folder.mkdir()
saved = vaebox.Client(f"{proxy_url}/elsewhere", token).download(job_id, folder)
out["elsewhere_same_bytes"] = saved.path.read_bytes() == expected
out["storage_saw_authorization"] = storage_seen
folder = scratch / "same"
folder.mkdir()
out["same_host_redirect"] = outcome(lambda: vaebox.Client(f"{proxy_url}/same", token).download(job_id, folder))

# Downloads bounded by the job's declared bytes: nothing kept past them.
for mode in ("endless", "overdeclared"):
    folder = scratch / mode
    folder.mkdir()
    out[f"{mode}_download"] = outcome(lambda: vaebox.Client(f"{proxy_url}/{mode}", token).download(job_id, folder))
    out[f"{mode}_files_left"] = sorted(p.name for p in folder.iterdir())

# Malformed answers: the client's own error for every call and kind.
calls = {
    "job": lambda client: client.job(job_id),
    "jobs": lambda client: client.jobs(),
    "models": lambda client: client.models(),
    "presets": lambda client: client.presets(),
    "download": lambda client: client.download(job_id, scratch / "malformed", overwrite=True),
}
(scratch / "malformed").mkdir()
for mode in MALFORMED:
    client = vaebox.Client(f"{proxy_url}/{mode}", token)
    for name, call in calls.items():
        out[f"{mode}/{name}"] = outcome(lambda: call(client))
out["badevent/follow"] = outcome(lambda: vaebox.Client(f"{proxy_url}/badevent", token).follow(job_id))

# The command: a one-line error, no traceback.
command = subprocess.run(
    [sys.executable, "-m", "vaebox", "--url", f"{proxy_url}/wrongfield", "status", job_id], capture_output=True, text=True,
    env=dict(os.environ, PYTHONPATH=str(Path(vaebox.__file__).parents[1]), VAEBOX_CLIENT_TOKEN=token),
)
out["command_exit"] = command.returncode
out["command_stderr"] = command.stderr
print(json.dumps(out))
