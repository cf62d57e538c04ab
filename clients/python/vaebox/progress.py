"""One line per job on stderr: redrawn in place (`\\r`) on a terminal, plain lines in a log."""
from __future__ import annotations

import sys
from typing import Optional, TextIO

from . import describe

BAR_WIDTH = 24


class ProgressLine:
    def __init__(self, label: str, stream: Optional[TextIO] = None):
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.drawn = 0
        self.last_key = None

    def job(self, job) -> None:
        progress = job.get("progress") or {}
        status = job["status"]
        fraction = 1.0 if status == "succeeded" else float(progress.get("fraction") or 0.0)
        stage = progress.get("stage") or ""
        details = [describe.state(job)]
        if stage and status == "running":
            details.append(stage)
        if progress.get("total"):
            details.append(f"{progress.get('done', 0)}/{progress['total']} {progress.get('unit', '')}".rstrip())
        if progress.get("eta_s") is not None and status == "running":
            details.append(f"eta {progress['eta_s']:.0f}s")
        if status == "paused":
            # Paused on the box (by its owner, or on the box's page): this keeps waiting, so say how it goes on.
            details.append(f"waiting for `vaebox-client resume {job['id']}`")
        # In a log, a line when the status, stage or place in the queue changes or another tenth is done, not per frame.
        place = (job.get("queue") or {}).get("position")
        self.show(fraction, "  ".join(details), key=(status, job.get("pausing"), place, stage, int(fraction * 10)))

    def download(self, done: int, total: int) -> None:
        fraction = done / total if total else 1.0
        self.show(fraction, f"download {done >> 10}/{total >> 10} KiB", key=("download", int(fraction * 10)))

    def show(self, fraction: float, text: str, key) -> None:
        filled = int(round(max(0.0, min(1.0, fraction)) * BAR_WIDTH))
        line = f"{self.label}  [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {fraction * 100:3.0f}%  {text}"
        if self.tty:
            self.stream.write("\r" + line + " " * max(0, self.drawn - len(line)))
            self.drawn = len(line)
        elif key != self.last_key:
            self.stream.write(line + "\n")
        self.last_key = key
        self.stream.flush()

    def done(self, text: str) -> None:
        """Ends the job's line with `text` (where its result went, or why it failed)."""
        if self.tty:
            self.stream.write("\r" + f"{self.label}  {text}".ljust(self.drawn) + "\n")
        else:
            self.stream.write(f"{self.label}  {text}\n")
        self.drawn = 0
        self.stream.flush()
