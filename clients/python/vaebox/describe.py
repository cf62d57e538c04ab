"""A job's state in a few words, the same in the listing, `status`, the progress line and the answers of
pause, resume and cancel: where a queued job stands, a pause under way, a partial result."""
from __future__ import annotations

from typing import Optional


def duration(seconds: float) -> str:
    """`45 s`, `3 min`, `1 h 20 min`: an estimate, so no finer than it can be (and never `0 s`)."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def size(count: int) -> str:
    """`512 bytes`, `1.2 MiB`, `3.4 GiB`."""
    if count < 1024:
        return f"{count} bytes"
    value, unit = count / 1024, "KiB"
    for larger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.1f} {unit}"


def queue_place(job) -> Optional[str]:
    """`position 2 · starts in about 3 min` for a queued job (its place among every owner's jobs), else None."""
    place = job.get("queue")
    if not place:
        return None
    starts_in = place.get("starts_in_s")
    # Null while a job ahead (or the box's first of its op and model) has nothing to estimate from.
    when = f"starts in about {duration(starts_in)}" if starts_in is not None else "start time not known yet"
    return f"position {place['position']} · {when}"


def state(job) -> str:
    """The status with what goes with it: `queued, position 1 · starts in about 40 s`, `running, pausing at its
    next checkpoint`, `cancelled, its finished frames kept as a partial result`."""
    status = job["status"]
    place = queue_place(job)
    if place:
        return f"{status}, {place}"
    if status == "running" and job.get("pausing"):
        return "running, pausing at its next checkpoint"
    if status == "cancelled" and job.get("partial"):
        return "cancelled, its finished frames kept as a partial result"
    return status
