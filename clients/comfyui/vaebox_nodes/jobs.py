"""A job on the box, followed as ComfyUI needs it: submit, poll its progress into the bar, cancel it when the
prompt is cancelled, and download its result.

Polling `GET /v1/jobs/{id}` rather than reading the event stream: the node must look at ComfyUI's Cancel flag
between reads anyway, and a poll every quarter second is the same information with no socket left open."""
import time

from . import comfy_hooks
from .connection import MAX_RESULT_BYTES
from .errors import VaeboxError

POLL_S = 0.25
FINAL = ("succeeded", "failed", "cancelled")


def submit(connection, fields, body, filename):
    """POST /v1/jobs with the file as the raw body and the job's fields in the query; the job (202)."""
    query = dict(fields, filename=filename)
    query = {k: _text(v) for k, v in query.items() if v is not None}
    headers = {"Content-Type": "application/octet-stream"}
    return connection.json("POST", "/v1/jobs", query=query, body=body, headers=headers)


def _text(value):
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def cancel(connection, job_id):
    """POST /v1/jobs/{id}/cancel; a job that ended in the meantime is left as it is."""
    try:
        connection.json("POST", f"/v1/jobs/{job_id}/cancel", body=b"")
    except VaeboxError as e:
        if e.code != "job-already-finished":
            raise


def follow(connection, job_id, timeout_s=None):
    """Polls the job to a final status, feeding the progress bar; on Cancel cancels it and raises. Returns the
    succeeded job; a failed or cancelled one raises VaeboxError with its code."""
    progress = comfy_hooks.Progress()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        if comfy_hooks.interrupted():
            cancel(connection, job_id)
            comfy_hooks.raise_interrupted()
        job = connection.json("GET", f"/v1/jobs/{job_id}")
        progress.update((job.get("progress") or {}).get("fraction"))
        if job.get("status") in FINAL:
            break
        if deadline is not None and time.monotonic() > deadline:
            cancel(connection, job_id)
            raise VaeboxError("client-timeout", f"the job did not finish in {timeout_s} s; it was cancelled", None, connection.url, job_id)
        time.sleep(POLL_S)
    if job["status"] != "succeeded":
        error = job.get("error") or {"code": job["status"], "message": f"the job ended {job['status']}"}
        raise VaeboxError(error["code"], error["message"], None, connection.url, job_id)
    progress.update(1.0)
    return job


def result(connection, job):
    """The finished job's output bytes."""
    _, _, data = connection.request("GET", f"/v1/jobs/{job['id']}/result", limit=MAX_RESULT_BYTES)
    return data


def run(connection, fields, body, filename):
    """Submit, follow and download: the output bytes and the job."""
    job = submit(connection, fields, body, filename)
    done = follow(connection, job["id"])
    return result(connection, done), done
