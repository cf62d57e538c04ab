#!/usr/bin/env python3
"""Figures for several workers on one queue (docs/several_boxes.md), measured in one run:

1. throughput: the same N small upscale jobs with 1 and with 2 workers (`serve --role worker`, 1 thread each)
   behind one API process (`serve --role api`), on one machine;
2. claim latency: job created -> started on an idle worker (the job's `timings.queued`), over M jobs sent one
   at a time, p50/p99.

Each setting runs on a throwaway PostgreSQL cluster (Debian's server binaries, initdb in a temp dir, loopback
port) and, for comparison, on one SQLite file. Needs a release build and ffmpeg (scripts/setup.sh --test).
Usage: scripts/load/fleet.py [--jobs 20] [--latency-jobs 100] [--frames 2]
"""
import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(ROOT, "target/release/vaebox")
QUERY = "op=upscale&model=realesrgan-animevideov3&scale=4&dtype=f32"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    """initdb + pg_ctl as Debian's `postgres` user when run as root (PostgreSQL refuses root)."""

    def __init__(self, root):
        self.bin = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))[-1]
        self.dir = os.path.join(root, "pg")
        os.makedirs(self.dir)
        self.port = free_port()
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", "postgres:postgres", root], check=True)
        self.run("initdb", "-D", self.data, "-A", "trust", "-U", "vaebox", "--no-sync", "-E", "UTF8")
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=60"
        self.run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-o", options, "-w", "start")

    @property
    def data(self):
        return os.path.join(self.dir, "data")

    @property
    def url(self):
        return f"postgres://vaebox@127.0.0.1:{self.port}/postgres"

    def run(self, program, *args):
        command = [os.path.join(self.bin, program), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=120)

    def stop(self):
        self.run("pg_ctl", "-D", self.data, "-m", "immediate", "stop")


class Fleet:
    def __init__(self, root, database, workers):
        self.root = root
        self.procs = []
        self.env = dict(os.environ, VAEBOX_DATA_DIR=os.path.join(root, "data"), VAEBOX_MODELS_DIR=os.path.join(ROOT, "models"),
                        VAEBOX_THREADS="1", VAEBOX_LOG="warn", VAEBOX_DATABASE=database or "",
                        VAEBOX_RETENTION_HOURS="0", VAEBOX_MAX_QUEUED_JOBS="1000")
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.start("api", VAEBOX_LISTEN=f"127.0.0.1:{port}")
        for _ in range(100):
            try:
                urllib.request.urlopen(self.base + "/healthz", timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        for i in range(workers):
            self.start("worker", VAEBOX_WORKER_NAME=f"worker-{i}")
        time.sleep(1.0)

    def start(self, role, **extra):
        log = open(os.path.join(self.root, f"{role}-{len(self.procs)}.log"), "w")
        env = dict(self.env, VAEBOX_ROLE=role, **extra)
        self.procs.append(subprocess.Popen([BINARY, "serve"], env=env, stdout=log, stderr=log, cwd=self.root))

    def submit(self, body):
        request = urllib.request.Request(f"{self.base}/v1/jobs?{QUERY}&filename=clip.mp4", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)["id"]

    def job(self, job_id):
        with urllib.request.urlopen(f"{self.base}/v1/jobs/{job_id}", timeout=30) as response:
            return json.load(response)

    def wait(self, job_id, poll=0.05):
        deadline = time.time() + 600
        while time.time() < deadline:
            job = self.job(job_id)
            if job["status"] in ("succeeded", "failed", "cancelled"):
                if job["status"] != "succeeded":
                    sys.exit(f"job {job_id} {job['status']}: {job.get('error')}")
                return job
            time.sleep(poll)
        sys.exit(f"job {job_id} did not finish")

    def stop(self):
        for proc in self.procs:
            proc.kill()
            proc.wait()


def throughput(root, database, workers, jobs, body):
    fleet = Fleet(root, database, workers)
    try:
        started = time.monotonic()
        ids = [fleet.submit(body) for _ in range(jobs)]
        ran_on = {fleet.wait(job_id, poll=0.2)["worker"] for job_id in ids}
        wall = time.monotonic() - started
    finally:
        fleet.stop()
    return wall, ran_on


def claim_latency(root, database, jobs, body):
    fleet = Fleet(root, database, 1)
    try:
        queued = [fleet.wait(fleet.submit(body))["timings"]["queued"] for _ in range(jobs)]
    finally:
        fleet.stop()
    queued.sort()
    return queued[len(queued) // 2], queued[min(len(queued) - 1, round(0.99 * (len(queued) - 1)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--latency-jobs", type=int, default=100)
    parser.add_argument("--frames", type=int, default=2)
    args = parser.parse_args()
    if not os.path.exists(BINARY):
        sys.exit("no release build: run scripts/setup.sh first")
    with tempfile.TemporaryDirectory() as scratch:
        os.chmod(scratch, 0o755)  # the clusters below it belong to `postgres` when run as root
        clip = os.path.join(scratch, "clip.mp4")
        subprocess.run(["ffmpeg", "-v", "error", "-i", os.path.join(ROOT, "tests/media/carphone_pristine.mp4"), "-frames:v", str(args.frames),
                        "-c:v", "libx264", "-pix_fmt", "yuv420p", clip], check=True, timeout=60)
        body = open(clip, "rb").read()
        print(f"# {args.jobs} upscale jobs of {args.frames} frames 176x144 (animevideov3 x4, f32), 1 thread per worker, {os.cpu_count()} cores")
        for name in ("postgres", "sqlite"):
            walls = {}
            for workers in (1, 2):
                root = tempfile.mkdtemp(dir=scratch)
                cluster = PgCluster(root) if name == "postgres" else None
                try:
                    wall, ran_on = throughput(root, cluster and cluster.url, workers, args.jobs, body)
                finally:
                    if cluster:
                        cluster.stop()
                walls[workers] = wall
                print(f"{name}: {workers} worker(s): {wall:.1f} s wall, {args.jobs / wall:.2f} jobs/s, ran on {sorted(ran_on)}")
            print(f"{name}: 2 workers / 1 worker throughput: {walls[1] / walls[2]:.2f}x")
            root = tempfile.mkdtemp(dir=scratch)
            cluster = PgCluster(root) if name == "postgres" else None
            try:
                p50, p99 = claim_latency(root, cluster and cluster.url, args.latency_jobs, body)
            finally:
                if cluster:
                    cluster.stop()
            print(f"{name}: claim latency (created -> started, idle worker) over {args.latency_jobs} jobs: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms")


if __name__ == "__main__":
    main()
