"""A job on the box, followed as ComfyUI needs it: submit, follow its event stream into the progress bar (polling
when the stream cannot be had or drops), cancel it when the prompt is cancelled, and download its result."""
import time

from . import comfy_hooks, events
from .connection import MAX_RESULT_BYTES
from .errors import VaeboxError

POLL_S = 0.25
# How often ComfyUI's Cancel flag is looked at while the event stream is quiet.
WATCH_S = 0.2
# Not `paused`: a job paused on the box (from its page or another client) goes on once resumed, so the node waits on.
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
    """Follows the job to a final status, feeding the progress bar; on Cancel cancels it and raises. Returns the
    succeeded job; a failed or cancelled one raises VaeboxError with its code."""
    progress = comfy_hooks.Progress()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    job = watch_events(connection, job_id, progress, deadline)
    if job is None or job.get("status") not in FINAL:
        job = poll(connection, job_id, progress, deadline)
    if job["status"] != "succeeded":
        error = job.get("error") or {"code": job["status"], "message": f"the job ended {job['status']}"}
        raise VaeboxError(error["code"], error["message"], None, connection.url, job_id)
    progress.update(1.0)
    return job


def watch_events(connection, job_id, progress, deadline):
    """The last job the event stream carried (final unless the stream ended early), or None."""
    stream = events.JobEvents(connection, job_id)
    job = None
    try:
        while True:
            stop_if_asked(connection, job_id, deadline)
            item = stream.next(WATCH_S)
            if item is events.ENDED:
                return job
            if item is not None:
                job = item
                report(progress, job)
                if job.get("status") in FINAL:
                    return job
    finally:
        stream.close()


def poll(connection, job_id, progress, deadline):
    """`GET /v1/jobs/{id}` every POLL_S to a final status: the job."""
    while True:
        stop_if_asked(connection, job_id, deadline)
        job = connection.json("GET", f"/v1/jobs/{job_id}")
        report(progress, job)
        if job.get("status") in FINAL:
            return job
        time.sleep(POLL_S)


def report(progress, job):
    """The job's fraction on the bar and its state on the node: where it stands in the box's queue, or paused."""
    progress.update((job.get("progress") or {}).get("fraction"))
    progress.say(state_text(job))


def state_text(job):
    """`vaebox: queued, position 2 · starts in about 40 s`, `vaebox: paused on the box …`, `vaebox: running`."""
    status = job.get("status")
    place = job.get("queue")
    if status == "queued" and place:
        starts_in = place.get("starts_in_s")
        when = f"starts in about {duration(starts_in)}" if starts_in is not None else "start time not known yet"
        return f"vaebox: queued, position {place['position']} · {when}"
    if status == "paused":
        return "vaebox: paused on the box; waiting until it is resumed there (Cancel here cancels it)"
    if status == "running" and job.get("pausing"):
        return "vaebox: running, pausing at its next checkpoint"
    return f"vaebox: {status}"


def duration(seconds):
    """`45 s`, `12 min`: an estimate, no finer than it can be."""
    return f"{max(1, round(seconds))} s" if seconds < 90 else f"{round(seconds / 60)} min"


def stop_if_asked(connection, job_id, deadline):
    """Cancels the job and raises when the prompt was cancelled or the deadline passed."""
    if comfy_hooks.interrupted():
        cancel(connection, job_id)
        comfy_hooks.raise_interrupted()
    if deadline is not None and time.monotonic() > deadline:
        cancel(connection, job_id)
        raise VaeboxError("client-timeout", "the job did not finish in time; it was cancelled", None, connection.url, job_id)


def result(connection, job):
    """The finished job's output bytes."""
    _, _, data = connection.request("GET", f"/v1/jobs/{job['id']}/result", limit=MAX_RESULT_BYTES)
    return data


def run(connection, fields, body, filename):
    """Submit, follow and download: the output bytes and the job."""
    job = submit(connection, fields, body, filename)
    done = follow(connection, job["id"])
    return result(connection, done), done
