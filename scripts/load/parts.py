#!/usr/bin/env python3
"""One job on two workers (issue 56, docs/benchmarks.md): the same upscale of a clip of 4 segments, run whole
(`parts=1`, one worker) and in parts (`parts=auto`: one per worker), side by side in one run, on

1. one box with two CPU workers (`devices = cpu,cpu`, 1 thread each), its SQLite queue and one data dir;
2. two boxes on a throwaway PostgreSQL cluster, each worker process on its own data dir, with a `file://`
   shared storage between them (an API process and two `serve --role worker`, 1 thread each).

Wall time is from the upload's answer to the job's success as the API reports it; the frames of both results
are decoded and compared. Needs a release build and ffmpeg (scripts/setup.sh --test).
Usage: scripts/load/parts.py [--frames 240] [--checkpoint-s 2]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import BINARY, ROOT, PgCluster, free_port  # noqa: E402

QUERY = "op=upscale&model=realesrgan-animevideov3&scale=2&dtype=f32&filename=clip.mp4"


class Processes:
    """`serve` processes on loopback, with the settings every one of them shares."""

    def __init__(self, root, **shared):
        self.root, self.procs = root, []
        self.env = dict(os.environ, VAEBOX_MODELS_DIR=os.path.join(ROOT, "models"), VAEBOX_THREADS="1", VAEBOX_LOG="warn",
                        VAEBOX_RETENTION_HOURS="0", **shared)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"

    def start(self, name, **extra):
        log = open(os.path.join(self.root, f"{name}.log"), "w")
        env = dict(self.env, VAEBOX_DATA_DIR=os.path.join(self.root, extra.pop("data", "data")), **extra)
        self.procs.append(subprocess.Popen([BINARY, "serve"], env=env, stdout=log, stderr=log, cwd=self.root))

    def ready(self, workers):
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/healthz", timeout=2) as response:
                    import json
                    if len(json.load(response).get("workers", [])) >= workers:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit("the box did not list its workers")

    def run(self, body, parts):
        import json
        request = urllib.request.Request(f"{self.base}/v1/jobs?{QUERY}&parts={parts}", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            job_id = json.load(response)["id"]
        started = time.monotonic()
        while True:
            with urllib.request.urlopen(f"{self.base}/v1/jobs/{job_id}", timeout=30) as response:
                job = json.load(response)
            if job["status"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.05)
        wall = time.monotonic() - started
        if job["status"] != "succeeded":
            sys.exit(f"job {job_id} {job['status']}: {job.get('error')}")
        with urllib.request.urlopen(self.base + job["output"]["url"], timeout=60) as response:
            result = response.read()
        return wall, job, result

    def stop(self):
        for proc in self.procs:
            proc.kill()
            proc.wait()


def frames_of(result, scratch):
    path = os.path.join(scratch, "result.mp4")
    with open(path, "wb") as f:
        f.write(result)
    return subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], check=True, capture_output=True).stdout


def compare(name, box, body, scratch):
    whole_s, _, whole = box.run(body, 1)
    split_s, job, split = box.run(body, "auto")
    parts = job.get("parts") or []
    same = frames_of(whole, scratch) == frames_of(split, scratch)
    workers = sorted({p.get("worker") for p in parts})
    print(f"{name}: whole (parts=1) {whole_s:.1f} s | in {len(parts)} parts on {workers} {split_s:.1f} s | "
          f"ratio {split_s / whole_s:.2f} | frames identical: {same}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=240)
    parser.add_argument("--checkpoint-s", type=float, default=2.0)
    args = parser.parse_args()
    if not os.path.exists(BINARY):
        sys.exit("no release build: run scripts/setup.sh first")
    with tempfile.TemporaryDirectory() as scratch:
        os.chmod(scratch, 0o755)  # the cluster below it belongs to `postgres` when run as root
        clip = os.path.join(scratch, "clip.mp4")
        subprocess.run(["ffmpeg", "-v", "error", "-stream_loop", "-1", "-i", os.path.join(ROOT, "tests/media/carphone_pristine.mp4"),
                        "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-map", "0:v:0", "-map", "1:a:0", "-c:a", "aac", "-shortest",
                        "-frames:v", str(args.frames), "-c:v", "libx264", "-pix_fmt", "yuv420p", clip], check=True, timeout=120)
        body = open(clip, "rb").read()
        print(f"# upscale of {args.frames} frames 176x144 (animevideov3 x2, f32), checkpoint_s {args.checkpoint_s} "
              f"({args.frames / (29.97 * args.checkpoint_s):.1f} segments), 1 thread per worker, {os.cpu_count()} cores")

        root = tempfile.mkdtemp(dir=scratch)
        box = Processes(root, VAEBOX_CHECKPOINT_S=str(args.checkpoint_s))
        box.start("box", VAEBOX_LISTEN=f"127.0.0.1:{box.port}", VAEBOX_DEVICES="cpu,cpu", VAEBOX_WORKER_NAME="box")
        try:
            box.ready(2)
            compare("one box, devices cpu,cpu (SQLite)", box, body, root)
        finally:
            box.stop()

        root = tempfile.mkdtemp(dir=scratch)
        cluster = PgCluster(root)
        boxes = Processes(root, VAEBOX_CHECKPOINT_S=str(args.checkpoint_s), VAEBOX_DATABASE=cluster.url,
                          VAEBOX_STORAGE="file://" + os.path.join(root, "shared"))
        boxes.start("api", data="api", VAEBOX_ROLE="api", VAEBOX_LISTEN=f"127.0.0.1:{boxes.port}")
        for name in ("worker-a", "worker-b"):
            boxes.start(name, data=name, VAEBOX_ROLE="worker", VAEBOX_WORKER_NAME=name)
        try:
            boxes.ready(2)
            compare("two boxes on PostgreSQL, own data dirs, file:// storage", boxes, body, root)
        finally:
            boxes.stop()
            cluster.stop()


if __name__ == "__main__":
    main()
