"""A job on the box, followed as ComfyUI needs it: submit, follow its event stream into the progress bar (polling
when the stream cannot be had), wait for a box that restarts and take up its job again by id, cancel it when the
prompt is cancelled or the box stays away, and download its result."""
import os
import threading
import time

from . import comfy_hooks, events
from .connection import MAX_RESULT_BYTES
from .errors import VaeboxError

POLL_S = 0.25
# A box that stops answering while a node waits on its job (a restart, a reboot, a network blip) is asked again
# this long, every RETRY_FIRST_S doubling to RETRY_MAX_S, before the node gives up and cancels the job: a restart
# (the box hands the running job back and takes it up again) takes seconds, a model's first load a minute or two.
RECONNECT_S = float(os.environ.get("COMFY_VAEBOX_RECONNECT_S") or 300)
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0
# One try's bound while the box is away: an address that swallows connections must not eat the wait in one try.
RETRY_TIMEOUT_S = 10.0
# How often ComfyUI's Cancel flag is looked at while the event stream is quiet.
WATCH_S = 0.2
# Not `paused`: a job paused on the box (from its page or another client) goes on once resumed, so the node waits on.
FINAL = ("succeeded", "failed", "cancelled")


_lock = threading.Lock()
_abandoned = {}  # box url -> ids of jobs given up on while it was away, cancelled when it answers again


def submit(connection, fields, body, filename):
    """POST /v1/jobs with the file as the raw body and the job's fields in the query; the job (202)."""
    cancel_abandoned(connection)
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


def cancel_abandoned(connection):
    """Cancels the jobs given up on while this box was away (best effort: they stay listed when it is away still)."""
    with _lock:
        waiting = sorted(_abandoned.get(connection.url, ()))
    for job_id in waiting:
        try:
            cancel(connection, job_id)
        except VaeboxError as e:
            if e.code == "unreachable":
                return
        with _lock:
            _abandoned.get(connection.url, set()).discard(job_id)


def cancel_best_effort(connection, job_id):
    """Cancels the job; a box that cannot be reached has it cancelled when it answers again. Whether it is now."""
    try:
        cancel(connection, job_id)
        return True
    except VaeboxError as e:
        if e.code != "unreachable":
            return False  # job-not-found and the like: nothing of ours is left running there
    with _lock:
        _abandoned.setdefault(connection.url, set()).add(job_id)
    return False


def follow(connection, job_id, timeout_s=None):
    """Follows the job to a final status, feeding the progress bar; on Cancel cancels it and raises. While the box
    is away (restarting) it waits for it, up to RECONNECT_S, and follows the same job again. Returns the
    succeeded job; a failed or cancelled one raises VaeboxError with its code."""
    progress = comfy_hooks.Progress()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        job = watch_events(connection, job_id, progress, deadline)
        if job is None:
            job = poll(connection, job_id, progress, deadline)  # no stream here (a proxy without it): poll to the end
            break
        if job.get("status") in FINAL:
            break
        # The stream ended before the job: the box is stopping (`shutdown`) or the link dropped. Where the job
        # stands, once the box answers; then its stream again.
        job = patiently(connection, job_id, progress, deadline, lambda: job_now(connection, job_id))
        report(progress, job)
        if job.get("status") in FINAL:
            break
        wait_watching(connection, job_id, deadline, POLL_S)  # a stream that keeps ending is not reopened in a spin
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
        job = patiently(connection, job_id, progress, deadline, lambda: job_now(connection, job_id))
        report(progress, job)
        if job.get("status") in FINAL:
            return job
        time.sleep(POLL_S)


def job_now(connection, job_id):
    """GET /v1/jobs/{id}, within RETRY_TIMEOUT_S."""
    return connection.json("GET", f"/v1/jobs/{job_id}", timeout=min(connection.timeout, RETRY_TIMEOUT_S))


def patiently(connection, job_id, progress, deadline, call):
    """`call()`'s answer; while the box cannot be reached, `call` again with backoff for up to RECONNECT_S, saying
    so under the node (ComfyUI's Cancel still cancels). Past that the job is cancelled (when the box can be told)
    and VaeboxError `unreachable` raised."""
    away_since, pause = None, RETRY_FIRST_S
    while True:
        stop_if_asked(connection, job_id, deadline)
        try:
            answer = call()
            if away_since is not None:
                progress.say(f"vaebox: the box is back after {duration(time.monotonic() - away_since)}; following job {job_id[:8]} again")
            return answer
        except VaeboxError as e:
            if e.code != "unreachable":
                raise
            now = time.monotonic()
            away_since = now if away_since is None else away_since
            left = RECONNECT_S - (now - away_since)
            if left <= 0:
                cancelled = cancel_best_effort(connection, job_id)
                what = "cancelled it" if cancelled else "it is cancelled when the box answers the next job sent to it"
                message = f"the box did not answer for {duration(RECONNECT_S)} while job {job_id} ran ({e.message}); gave up on the job: {what}"
                raise VaeboxError("unreachable", message, None, connection.url, job_id) from None
            progress.say(f"vaebox: the box is not answering (restarting?); asking again for up to {duration(left)}, then job {job_id[:8]} is cancelled")
            wait_watching(connection, job_id, deadline, min(pause, left))
            pause = min(2 * pause, RETRY_MAX_S)


def wait_watching(connection, job_id, deadline, seconds):
    """Sleeps `seconds`, looking at ComfyUI's Cancel every WATCH_S."""
    end = time.monotonic() + seconds
    while True:
        stop_if_asked(connection, job_id, deadline)
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(WATCH_S, left))


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
        cancel_best_effort(connection, job_id)
        comfy_hooks.raise_interrupted()
    if deadline is not None and time.monotonic() > deadline:
        cancel_best_effort(connection, job_id)
        raise VaeboxError("client-timeout", "the job did not finish in time; it was cancelled", None, connection.url, job_id)


def result(connection, job):
    """The finished job's output bytes (waiting, as `follow` does, for a box that restarts meanwhile)."""
    fetch = lambda: connection.request("GET", f"/v1/jobs/{job['id']}/result", limit=MAX_RESULT_BYTES)[2]  # noqa: E731
    return patiently(connection, job["id"], comfy_hooks.Progress(), None, fetch)


def run(connection, fields, body, filename):
    """Submit, follow and download: the output bytes and the job."""
    job = submit(connection, fields, body, filename)
    done = follow(connection, job["id"])
    return result(connection, done), done
