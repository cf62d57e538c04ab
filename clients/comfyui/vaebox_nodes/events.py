"""A job's Server-Sent Events (`GET /v1/jobs/{id}/events`: `event: job` with the whole job, at once and on each
change, until a final status) read on a worker thread, so that the node's thread can look at ComfyUI's Cancel
flag while the stream is quiet; a read never blocks the node."""
import http.client
import json
import queue
import threading
import urllib.parse

from .connection import MAX_JSON_BYTES, hang_up

PATH = "/v1/jobs/{id}/events"
# The box sends a keep-alive comment every 15 s; a stream silent for this long has dropped.
IDLE_S = 60.0
# Once the connection is hung up the worker ends at once; this only bounds a stuck close.
JOIN_S = 5.0
ENDED = object()


class JobEvents:
    """The jobs a job's event stream carries, in order, then ENDED (the final status, a `shutdown` event, a
    refusal, a drop or a silence of IDLE_S: the caller tells them apart by the last job's status)."""

    def __init__(self, connection, job_id):
        self.connection = connection
        url = urllib.parse.urlsplit(connection.address(PATH.format(id=urllib.parse.quote(job_id))))
        kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        self.link = kind(url.hostname, url.port, timeout=IDLE_S)
        self.target = url.path
        self.jobs = queue.Queue()
        self.worker = threading.Thread(target=self.read, name="vaebox-job-events", daemon=True)
        self.worker.start()

    def read(self):
        try:
            self.link.request("GET", self.target, headers=self.connection.headers({"Accept": "text/event-stream"}))
            response = self.link.getresponse()
            if response.status == 200:
                for kind, data in events(response):
                    if kind == "shutdown":
                        break
                    if kind == "job":
                        self.jobs.put(json.loads(data))
        except (OSError, ValueError, http.client.HTTPException):
            pass  # the caller polls from here
        finally:
            self.jobs.put(ENDED)

    def next(self, wait_s):
        """The next job, ENDED, or None when nothing came within `wait_s`."""
        try:
            return self.jobs.get(timeout=wait_s)
        except queue.Empty:
            return None

    def close(self):
        hang_up(self.link)
        self.worker.join(JOIN_S)
        self.link.close()


def events(response):
    """(event, data) of each event of an SSE body; comments (the keep-alives) skipped."""
    kind, data = "message", []
    while True:
        line = response.readline(MAX_JSON_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_JSON_BYTES:
            raise ValueError("an event over the size of any job")
        line = line.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
