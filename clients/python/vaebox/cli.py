"""The `vaebox-client` command: estimate and submit files or folders, follow them, list, pause, resume, cancel and
download jobs, run a try's whole clip.

The box's address comes from --url, else VAEBOX_CLIENT_URL, else http://127.0.0.1:8080; an access token
from --token, else VAEBOX_CLIENT_TOKEN. (Not VAEBOX_URL: the server reads every VAEBOX_* variable as
configuration and refuses names it does not know; it leaves these two alone.)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional

from . import describe
from .client import Client
from .errors import BoxError
from .files import remember_result, sorted_files
from .progress import ProgressLine

URL_VARIABLE = "VAEBOX_CLIENT_URL"
TOKEN_VARIABLE = "VAEBOX_CLIENT_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8080"
COMMAND = "vaebox-client"
# The server binary's own commands (src/main.rs). `vaebox` was this command's name too, and the server's
# README says `vaebox run ...`: given one of these, say which program takes it instead of "invalid choice".
SERVER_COMMANDS = ("serve", "run", "bench", "calibrate")


def main(argv: Optional[List[str]] = None, old_name: bool = False) -> int:
    argv = sys.argv[1:] if argv is None else argv
    server_command = first_command(argv)
    if server_command in SERVER_COMMANDS:
        print(server_command_message(server_command, old_name), file=sys.stderr)
        return 2
    args = parser().parse_args(argv)
    try:
        url = getattr(args, "url", None) or os.environ.get(URL_VARIABLE) or DEFAULT_URL
        client = Client(url, getattr(args, "token", None) or os.environ.get(TOKEN_VARIABLE) or None)
        code = args.command(client, args)
        sys.stdout.flush()  # here, where a closed pipe is caught, rather than at exit
        return code
    except BoxError as error:
        print(f"error: {error.code}: {error.message}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # before OSError, which it is
        # `vaebox-client list | head`: the reader has what it wanted. Python would complain again at exit, flushing
        # into the closed pipe, unless stdout goes nowhere from here on.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:  # a file here: missing, unreadable, a folder that does not exist
        print(f"error: local-file: {error}", file=sys.stderr)
        return 1
    except ValueError as error:  # a URL that is not one
        print(f"error: invalid-url: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted (jobs on the box go on; `vaebox-client download ID` continues a download)", file=sys.stderr)
        return 130


def old_name_main() -> int:
    """The `vaebox` console script of earlier installs, kept so that scripts calling it go on working. It shares
    its name with the server binary, and comes first on PATH in the venv that installed it: told a server command
    (`vaebox run ...`, as the README shows), it names the server binary rather than answering "invalid choice"."""
    return main(old_name=True)


def first_command(argv: List[str]) -> Optional[str]:
    """The first word that is not an option (nor --url's or --token's value)."""
    words = iter(argv)
    for word in words:
        if word in ("--url", "--token"):
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def server_binary() -> Optional[str]:
    """A `vaebox` on PATH other than this script: the server's binary, when it is installed."""
    here = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder or ".", "vaebox")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK) and os.path.realpath(candidate) != here:
            return candidate
    return None


def server_command_message(command: str, old_name: bool) -> str:
    """Which program takes `command`: the server binary (the one on PATH, when there is one)."""
    found = server_binary()
    server = f"{found} {command} ..." if found else f"target/release/vaebox {command} ...   (built in the repository; see the README)"
    lines = [
        f"error: `{command}` is a command of the vaebox server (the Rust binary), not of this Python client.",
        f"  the server: {server}",
        f"  the client: {COMMAND} COMMAND ...   (submit, list, status, download, ...; {COMMAND} --help)",
    ]
    if old_name:
        lines.append(f"This `vaebox` is the client's old name, kept for scripts; it is `{COMMAND}` now.")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    # --url and --token are taken before or after the command. One set of actions serves both parsers, so
    # their default stays SUPPRESS (a default set on one would let the command's parser reset the other's value).
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--url", default=argparse.SUPPRESS, help=f"the box (default: ${URL_VARIABLE}, else {DEFAULT_URL})")
    connection.add_argument("--token", default=argparse.SUPPRESS, help=f"an access token's secret (default: ${TOKEN_VARIABLE})")
    main_parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0], parents=[connection])
    commands = main_parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    submit = commands.add_parser("submit", parents=[connection], help="upload a file, or each video file of a folder, as jobs")
    submit.add_argument("path", type=Path, metavar="FILE_OR_FOLDER")
    add_job_fields(submit)
    submit.add_argument("--wait", action="store_true", help="follow each job and download its result next to its input")
    submit.set_defaults(command=submit_command)

    estimate = commands.add_parser("estimate", parents=[connection], help="what a job would make and take, without queueing it")
    estimate.add_argument("path", type=Path, metavar="FILE")
    add_job_fields(estimate)
    estimate.add_argument("--json", action="store_true", help="the estimate as the box sends it")
    estimate.set_defaults(command=estimate_command)

    listing = commands.add_parser("list", parents=[connection], help="jobs, newest first")
    listing.add_argument("--status", help="queued, paused, running, succeeded, failed or cancelled")
    listing.add_argument("--limit", type=int)
    listing.add_argument("--json", action="store_true", help="the jobs as the box sends them")
    listing.set_defaults(command=list_command)

    status = commands.add_parser("status", parents=[connection], help="one job")
    status.add_argument("id")
    status.add_argument("--json", action="store_true", help="the job as the box sends it")
    status.set_defaults(command=status_command)

    cancel = commands.add_parser("cancel", parents=[connection], help="cancel a queued, paused or running job")
    cancel.add_argument("id")
    cancel.add_argument("--keep", action="store_true", help="keep the frames it finished as a shorter result (videos only)")
    cancel.set_defaults(command=cancel_command)

    pause = commands.add_parser("pause", parents=[connection], help="hold a job back: queued, it is passed over; running, it stops at its next checkpoint")
    pause.add_argument("id")
    pause.set_defaults(command=lambda client, args: print_state(client.pause(args.id)))

    resume = commands.add_parser("resume", parents=[connection], help="put a paused job back in line where it was")
    resume.add_argument("id")
    resume.set_defaults(command=lambda client, args: print_state(client.resume(args.id)))

    whole = commands.add_parser("whole", parents=[connection], help="run the whole clip of a job over part of its input")
    whole.add_argument("id")
    whole.set_defaults(command=whole_command)

    download = commands.add_parser("download", parents=[connection], help="save a job's result (continues an interrupted download)")
    download.add_argument("id")
    download.add_argument("dest", nargs="?", type=Path, help="a file, or a folder for the box's file name (default: here)")
    download.set_defaults(command=download_command)

    models = commands.add_parser("models", parents=[connection], help="the box's models: name, kind, ops, scales, present, family")
    models.add_argument("--json", action="store_true")
    models.set_defaults(command=models_command)

    presets = commands.add_parser("presets", parents=[connection], help="the box's presets")
    presets.add_argument("--json", action="store_true")
    presets.set_defaults(command=presets_command)
    return main_parser


def add_job_fields(command: argparse.ArgumentParser) -> None:
    """The fields of a job, the same for `submit` and `estimate`."""
    command.add_argument("--op", help="upscale, vae_encode, vae_decode, vae_reconstruct, restore, interpolate (default: the preset's, else upscale)")
    command.add_argument("--model", help="a model from `vaebox-client models` (default: the box's for the op)")
    command.add_argument("--preset", help="a preset from `vaebox-client presets`: fills in the fields not given")
    command.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="a job field (scale=2, dtype=bf16, ...); repeatable")


def job_fields(args) -> Dict[str, str]:
    fields = {}
    for item in args.param:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise BoxError("invalid-argument", f"--param takes NAME=VALUE, not {item!r}")
        fields[name.strip()] = value
    for name in ("model", "preset"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    return fields


def submit_command(client: Client, args) -> int:
    fields = job_fields(args)
    if args.path.is_dir():
        paths, skipped = sorted_files(args.path, args.op)
        for path, why in skipped:
            print(f"skipped {path}: {why}", file=sys.stderr)
        if not paths:
            raise BoxError("no-files", f"{args.path} holds no file to send ({len(skipped)} skipped)")
    elif args.path.is_file():
        paths = [args.path]
    else:
        raise BoxError("no-files", f"{args.path} does not exist")
    failures, submitted = 0, []
    for path in paths:
        try:
            job = client.submit(path, args.op, **fields)
        except BoxError as error:
            if error.status is None and error.code != "unreachable":
                raise  # refused here: the same for every file
            print(f"error: {error.code}: {path}: {error.message}", file=sys.stderr)
            failures += 1
            continue
        print(f"{job['id']}\t{path}", flush=True)
        submitted.append((path, job))
    if args.wait:
        for path, job in submitted:
            failures += 0 if wait_and_download(client, path, job) else 1
    return 1 if failures else 0


def wait_and_download(client: Client, path: Path, job) -> bool:
    line = ProgressLine(path.name)
    final = client.follow(job["id"], line.job)
    if final["status"] == "cancelled" and final.get("partial"):
        # Cancelled with --keep elsewhere: what it finished is saved, and the job still counts as not done.
        saved = client.download(final["id"], path.parent, on_progress=line.download)
        remember_result(saved.path)
        line.done(f"cancelled, partial result saved {saved.path}")
        return False
    if final["status"] != "succeeded":
        error = final.get("error") or {"code": final["status"], "message": "the job did not succeed"}
        line.done(final["status"])
        print(f"error: {error['code']}: {path}: {error['message']}", file=sys.stderr)
        return False
    saved = client.download(final["id"], path.parent, on_progress=line.download)
    remember_result(saved.path)
    line.done(f"saved {saved.path}")
    return True


def estimate_command(client: Client, args) -> int:
    if not args.path.is_file():
        raise BoxError("no-files", f"{args.path} is not a file")
    estimate = client.estimate(args.path, args.op, **job_fields(args))
    if args.json:
        print(json.dumps(estimate, indent=2))
        return 0
    rows = [("frames", str(estimate["frames"])), ("size", f"{estimate['width']}x{estimate['height']}")]
    # Time and bytes come from this box's own finished jobs of the op and model: none before the first.
    seconds = estimate.get("seconds")
    basis = f" (from {estimate['basis']})" if estimate.get("basis") else ""
    rows.append(("time", f"about {describe.duration(seconds)}{basis}" if seconds is not None else "not known yet: no such job has finished on this box"))
    output_bytes = estimate.get("output_bytes")
    rows.append(("result", f"about {describe.size(output_bytes)}" if output_bytes is not None else "size not known yet"))
    if estimate.get("disk_bytes") is not None:
        rows.append(("disk", f"about {describe.size(estimate['disk_bytes'])} while it runs"))
    for name, value in rows:
        print(f"{name:<9} {value}")
    return 0


def list_command(client: Client, args) -> int:
    jobs = client.jobs(status=args.status, limit=args.limit)
    if args.json:
        print(json.dumps(jobs, indent=2))
        return 0
    for job in jobs:
        print("\t".join([job["id"], job["status"], job["op"], job["model"], progress_column(job), job["input"]["file_name"], job["created_at"]]))
    return 0


def progress_column(job) -> str:
    """How far it got; for a queued job, where it stands in the queue."""
    return describe.queue_place(job) or percent(job)


def percent(job) -> str:
    if job["status"] == "succeeded":
        return "100%"
    fraction = (job.get("progress") or {}).get("fraction")
    return f"{fraction * 100:.0f}%" if fraction is not None else "-"


def status_command(client: Client, args) -> int:
    job = client.job(args.id)
    if args.json:
        print(json.dumps(job, indent=2))
        return 0
    progress = job.get("progress") or {}
    rows = [("id", job["id"]), ("status", describe.state(job)), ("op", job["op"]), ("model", job["model"])]
    media = job["input"].get("media") or {}
    size = f" ({media['width']}x{media['height']}, {media['frames']} frames)" if media.get("frames") else ""
    rows.append(("input", job["input"]["file_name"] + size))
    # A queued or paused job has progress when it ran before (it made way, or was paused while running).
    if job["status"] == "running" or (job["status"] in ("queued", "paused") and progress):
        stage = f" {progress['stage']}" if progress.get("stage") else ""
        rows.append(("progress", f"{percent(job)}{stage}"))
    if job.get("output"):
        rows.append(("output", f"{job['output']['file_name']} ({job['output']['bytes']} bytes)"))
    if job.get("error"):
        rows.append(("error", f"{job['error']['code']}: {job['error']['message']}"))
    for name, value in rows:
        print(f"{name:<9} {value}")
    return 0


def cancel_command(client: Client, args) -> int:
    return print_state(client.cancel(args.id, keep=args.keep))


def print_state(job) -> int:
    """`ID<tab>state`: the answer of pause, resume and cancel."""
    print(f"{job['id']}\t{describe.state(job)}")
    return 0


def whole_command(client: Client, args) -> int:
    job = client.run_whole(args.id)
    print(f"{job['id']}\t{job['status']}")
    return 0


def download_command(client: Client, args) -> int:
    line = ProgressLine(args.id[:8])
    saved = client.download(args.id, args.dest, on_progress=line.download)
    remember_result(saved.path)
    resumed = f", continued from byte {saved.resumed_from}" if saved.resumed_from else ""
    line.done(f"saved {saved.path}: {saved.bytes} bytes, {saved.received} fetched{resumed}")
    print(saved.path)
    return 0


def models_command(client: Client, args) -> int:
    models = client.models()
    if args.json:
        print(json.dumps(models, indent=2))
        return 0
    for model in models:
        scales = ",".join(f"x{s}" for s in model["scales"]) or "-"
        present = "present" if model["present"] else "missing"
        print("\t".join([model["name"], model["kind"], ",".join(model["ops"]), scales, present, family_column(model)]))
    return 0


def family_column(model) -> str:
    """`seedvr2`, `flashvsr 1.1`: the family tells which fields a restore model takes (FlashVSR's are not SeedVR2's),
    with its variant (a FlashVSR model's release) where it has one."""
    variant = model.get("variant")
    return f"{model['family']} {variant}" if variant else model["family"]


def presets_command(client: Client, args) -> int:
    presets = client.presets()
    if args.json:
        print(json.dumps(presets, indent=2))
        return 0
    if not presets:
        print("this box has no presets (an administrator adds them as [presets.NAME] tables in its config.toml)", file=sys.stderr)
    for name, fields in presets.items():
        print(name + "\t" + " ".join(f"{k}={v}" for k, v in fields.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
