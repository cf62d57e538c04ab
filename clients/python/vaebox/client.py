"""`vaebox.Client`: estimate and submit files as jobs, follow, pause, resume and cancel them, download their
results (resumable)."""
from __future__ import annotations

import http.client
import os
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, TypedDict, Union

from . import files
from ._generated import Estimate, Job, JobList, ModelInfo, ModelList
from .answers import checked, parse
from .errors import BoxError, MalformedAnswer
from .events import events
from .params import job_query
from .transport import Transport

# Not `paused`: a paused job goes on once resumed, so whoever waits on it waits on.
FINAL_STATUSES = ("succeeded", "failed", "cancelled")
# The box sends a keep-alive comment every 15 s; a stream silent for this long is broken.
STREAM_IDLE_S = 60.0
# A box that restarts (the stream ends with `event: shutdown`) is waited for this many tries, a second apart.
RECONNECT_TRIES = 120
CHUNK_BYTES = 1 << 20

PathLike = Union[str, "os.PathLike[str]"]


class PresetList(TypedDict):
    """`GET /v1/presets` (not a typed schema of the document: each preset's fields are the box's job fields)."""

    presets: Dict[str, Dict[str, Any]]


@dataclass
class Download:
    path: Path
    bytes: int
    resumed_from: int
    """Bytes that were already in the `.part` file and were not fetched again."""
    received: int
    """Bytes fetched by this call."""


class Client:
    """One box. `token` is an access token's secret (sent as `Authorization: Bearer`)."""

    def __init__(self, url: str = "http://127.0.0.1:8080", token: Optional[str] = None, timeout_s: float = 60.0):
        self.transport = Transport(url, token, timeout_s)

    @property
    def url(self) -> str:
        return self.transport.url

    def submit(self, path: PathLike, op: Optional[str] = None, **params: Any) -> Job:
        """Uploads the file as a job (`op` None: the preset's or the box's default, upscale). Parameters
        are the box's job fields (`model`, `scale`, `preset`, ...), checked by name before sending."""
        path = Path(path)
        query = job_query(op, params)
        query["filename"] = path.name
        return checked(self.transport.upload("/v1/jobs", query, path), Job, "POST /v1/jobs")

    def estimate(self, path: PathLike, op: Optional[str] = None, **params: Any) -> Estimate:
        """What the job `submit(path, op, **params)` would make and take on this box (its frames and size;
        its seconds, result bytes and disk where the box has finished such jobs before), checked as a
        submission is; nothing is queued. The file is uploaded, as for a submission."""
        path = Path(path)
        query = job_query(op, params)
        query["filename"] = path.name
        return checked(self.transport.upload("/v1/estimate", query, path), Estimate, "POST /v1/estimate")

    def job(self, job_id: str) -> Job:
        return self._job_answer("GET", job_path(job_id))

    def jobs(self, status: Optional[str] = None, limit: Optional[int] = None, offset: Optional[int] = None) -> List[Job]:
        """One page of jobs, newest first (the box's page size unless `limit`)."""
        query = {k: str(v) for k, v in (("status", status), ("limit", limit), ("offset", offset)) if v is not None}
        return checked(self.transport.json("GET", "/v1/jobs", query), JobList, "GET /v1/jobs")["jobs"]

    def cancel(self, job_id: str, keep: bool = False) -> Job:
        """Cancels a queued, paused or running job (a running one stops at its next chunk). `keep`: the frames
        it finished become its shorter result (`partial`, downloadable); the box refuses that with
        nothing-to-keep for a job that makes no video segments (a latent, a still, PNG frames)."""
        return self._job_answer("POST", job_path(job_id) + "/cancel", {"keep": "true"} if keep else None)

    def pause(self, job_id: str) -> Job:
        """Holds the job back: a queued one is passed over, a running one stops at its next checkpoint
        (`pausing` until then) and goes on from there when resumed. A paused job is not final."""
        return self._job_answer("POST", job_path(job_id) + "/pause")

    def resume(self, job_id: str) -> Job:
        """Puts a paused job back in line where it was (job-not-pausable when it is not paused)."""
        return self._job_answer("POST", job_path(job_id) + "/resume")

    def run_whole(self, job_id: str) -> Job:
        """The whole clip of a job over part of its input: a new job made by the box from the input that job
        kept, with the same settings and no range (its `from_try` names that job)."""
        return self._job_answer("POST", job_path(job_id) + "/whole")

    def models(self) -> List[ModelInfo]:
        return checked(self.transport.json("GET", "/v1/models"), ModelList, "GET /v1/models")["models"]

    def presets(self) -> Dict[str, Dict[str, Any]]:
        return checked(self.transport.json("GET", "/v1/presets"), PresetList, "GET /v1/presets")["presets"]

    def _job_answer(self, method: str, path: str, query: Optional[Dict[str, str]] = None) -> Job:
        return checked(self.transport.json(method, path, query), Job, f"{method} {path}")

    def follow(self, job_id: str, on_progress: Optional[Callable[[Job], None]] = None) -> Job:
        """Follows the job's event stream until it ends; `on_progress` gets every snapshot. Returns the
        final job (succeeded, failed or cancelled: a failed job is returned, not raised). A paused job is
        followed on, as `paused` snapshots, until it is resumed and ends or is cancelled."""
        tries = 0
        while True:
            try:
                stream = self.transport.open("GET", job_path(job_id) + "/events", headers={"Accept": "text/event-stream"}, timeout_s=STREAM_IDLE_S)
                with stream:
                    for name, data in events(stream):
                        tries = 0
                        if name != "job":
                            continue  # `shutdown`: the box is stopping; the job goes on after its restart
                        what = f"an event of GET {job_path(job_id)}/events"
                        job = checked(parse(data.encode("utf-8"), what), Job, what)
                        if on_progress is not None:
                            on_progress(job)
                        if job["status"] in FINAL_STATUSES:
                            return job
            except BoxError as error:
                if error.code != "unreachable":
                    raise
            except (OSError, http.client.HTTPException):
                pass  # the stream broke or fell silent: ask again
            tries += 1
            if tries > RECONNECT_TRIES:
                raise BoxError("unreachable", f"lost the event stream of job {job_id} and could not get it back")
            time.sleep(1.0)

    def download(self, job_id: str, dest: Optional[PathLike] = None, on_progress: Optional[Callable[[int, int], None]] = None,
                 overwrite: bool = False) -> Download:
        """Saves the job's result. `dest` None: the box's file name in the current folder; a folder: that
        name there (with `-1`, `-2`, ... when taken); a file: that file (an existing one only with
        `overwrite`). The bytes arrive in `DEST.<job>.part` first; a `.part` left by an interrupted
        download of the same job is continued with a Range request, not fetched again. A job cancelled
        with `keep` has its partial result downloaded."""
        job = self.job(job_id)
        output = job.get("output")
        if not output or (job["status"] != "succeeded" and not job.get("partial")):
            why = "it has no result yet" if job["status"] not in FINAL_STATUSES else "it has no result"
            raise BoxError("job-not-finished", f"job {job_id} is {job['status']}: {why}", None)
        name = files.safe_file_name(output["file_name"], f"{job_id}.result")
        target = Path(dest) if dest is not None else Path.cwd()
        if target.is_dir():
            target = files.free_path(target, name)
        elif target.exists() and not overwrite:
            raise BoxError("file-exists", f"{target} exists (choose another name, or overwrite)")
        part = part_path(target, job_id)
        total = int(output["bytes"])
        have = part.stat().st_size if part.exists() else 0
        if have > total:
            have = 0  # not this result's beginning
        resumed, received = have, 0
        if have < total:
            resumed, received = self._fetch(job_id, part, have, total, on_progress)
        size = part.stat().st_size
        if size != total:
            raise BoxError("download-incomplete", f"{part} holds {size} bytes, the result has {total}; run the download again to continue")
        if target.exists() and not overwrite:
            raise BoxError("file-exists", f"{target} appeared during the download; the result is in {part}")
        os.replace(part, target)
        return Download(path=target, bytes=total, resumed_from=resumed, received=received)

    def _fetch(self, job_id: str, part: Path, have: int, total: int, on_progress) -> Tuple[int, int]:
        """Writes the rest of the result into `part` from byte `have` (all of it when the box ignores the
        range); returns where it started and the bytes received."""
        headers = {"Range": f"bytes={have}-"} if have else {}
        response = self.transport.open("GET", job_path(job_id) + "/result", headers=headers, allow=(416,))
        with response:
            if response.status == 416:  # the part is not a beginning of this result
                return self._fetch(job_id, part, 0, total, on_progress) if have else (0, 0)
            start = content_range_start(response.headers.get("Content-Range")) if response.status == 206 else 0
            if start not in (0, have):
                raise BoxError("download-mismatch", f"asked for bytes from {have}, the box sent them from {start}")
            # The job declares its result's bytes: an answer that says or sends more is not that result, and is
            # not written past it (a proxy's or another program's endless stream would fill the disk).
            expected = total - start
            declared = response.headers.get("Content-Length")
            if declared is not None and (not declared.strip().isdigit() or int(declared) > expected):
                raise BoxError("download-too-large", f"the answer declares {declared!r} bytes from byte {start}; the job's result has {expected} there")
            received = 0
            with part.open("r+b" if start and part.exists() else "wb") as out:
                out.seek(start)
                out.truncate()
                while True:
                    try:
                        # One byte past the declared end at most, to see whether more comes.
                        chunk = response.read(min(CHUNK_BYTES, expected - received + 1))
                    except (OSError, http.client.HTTPException) as failure:  # what arrived stays in the .part for the next try
                        raise BoxError("download-incomplete", f"the connection broke at byte {start + received} of {total} ({failure}); "
                                       "run the download again to continue") from None
                    if not chunk:
                        break
                    if received + len(chunk) > expected:
                        out.close()
                        part.unlink()  # which of its bytes are the result's cannot be told
                        raise BoxError("download-too-large", f"the box sent more than the {total} bytes the job's result has; nothing was kept")
                    out.write(chunk)
                    received += len(chunk)
                    if on_progress is not None:
                        on_progress(start + received, total)
            return start, received


def job_path(job_id: str) -> str:
    return "/v1/jobs/" + urllib.parse.quote(job_id, safe="")


def part_path(target: Path, job_id: str) -> Path:
    """The job's id in the name: a `.part` of another job's result with the same name is never continued."""
    return target.with_name(f"{target.name}.{job_id[:8]}.part")


def content_range_start(value: Optional[str]) -> int:
    """`bytes 100-199/200` → 100."""
    try:
        return int(value.split(" ", 1)[1].split("-", 1)[0])
    except (AttributeError, IndexError, ValueError):
        raise BoxError("download-mismatch", f"a partial answer without a readable Content-Range ({value!r})") from None
