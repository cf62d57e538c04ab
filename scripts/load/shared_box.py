#!/usr/bin/env python3
"""Figures for a box shared by several people (README "A box shared by several people"), measured in one run
for each binary given, side by side:

1. while Ann's long upscale runs, Bob's 5-frame `/v1/decode` (diffusers' remote_decode sends the same) and his
   12-frame upscale: each one's wait, from the request to its answer (or its job's end), less its own compute
   (the job's `timings.total`); the long job's own total, and whether its frames equal an undisturbed run's;
2. the estimate of a 600-frame upscale after one earlier 90-frame job of the model, against its measured time
   (only where the binary has `POST /v1/estimate`).

Each binary runs on its own temporary data dir, with tokens for two users, `chunk_frames` 2, `short_job_s` 3 (the
long job here runs seconds, not minutes: a 12-frame job is short beside it) and the repository's models. A binary
from before `short_job_s` (`--before BINARY`) runs without that key, which it would refuse. Needs a release build
and the test media (scripts/setup.sh --test); the torch libraries are found through the repository's .venv.
Usage: scripts/load/shared_box.py [BINARY] [--before BINARY]   (default: target/release/vaebox)
"""
import glob
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UPSCALE = "op=upscale&model=realesrgan-animevideov3&scale=2"
ANN, BOB = "ann-secret-12345", "bob-secret-12345"
LONG_FRAMES = 400


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clip(folder, frames):
    path = os.path.join(folder, f"clip{frames}.mp4")
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-stream_loop", "-1", "-i",
                    os.path.join(ROOT, "tests/media/carphone_pristine.mp4"), "-vf", "scale=128:96,setsar=1",
                    "-frames:v", str(frames), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", path], check=True)
    return path


class Box:
    def __init__(self, binary, folder, shares):
        self.port = free_port()
        models = os.path.join(folder, "models")
        os.makedirs(os.path.join(models, "vae"))
        os.symlink(os.path.join(ROOT, "models/realesrgan"), os.path.join(models, "realesrgan"))
        with open(os.path.join(ROOT, "../shared/reference/wan21_original/weights.safetensors"), "rb") as src:
            with open(os.path.join(models, "vae/wan21-small.safetensors"), "wb") as dst:
                dst.write(src.read())
        env = dict(os.environ, VAEBOX_LISTEN=f"127.0.0.1:{self.port}", VAEBOX_DATA_DIR=os.path.join(folder, "data"),
                   VAEBOX_MODELS_DIR=models, VAEBOX_THREADS="2", VAEBOX_CHUNK_FRAMES="2", VAEBOX_LOG="warn",
                   VAEBOX_TOKENS=f"ann:{ANN},bob:{BOB}")
        if shares:
            env["VAEBOX_SHORT_JOB_S"] = "3"
        # A binary built in another folder has no rpath to this one's torch.
        env["LD_LIBRARY_PATH"] = ":".join(glob.glob(os.path.join(ROOT, ".venv/lib/python3*/site-packages/torch/lib")))
        # In the temporary folder: no config.toml there, only the variables above.
        self.process = subprocess.Popen([os.path.abspath(binary), "serve"], env=env, stdout=subprocess.DEVNULL, cwd=folder)
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"{binary} did not start")

    def call(self, method, path, token, body=None, binary=False):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method=method,
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=600) as answer:
            data = answer.read()
            return (data, dict(answer.headers)) if binary else json.loads(data)

    def submit(self, token, query, path):
        with open(path, "rb") as f:
            return self.call("POST", f"/v1/jobs?{query}&filename={os.path.basename(path)}", token, f.read())

    def job(self, token, id):
        return self.call("GET", f"/v1/jobs/{id}", token)

    def wait(self, token, id, until=lambda j: j["status"] in ("succeeded", "failed", "cancelled")):
        while True:
            job = self.job(token, id)
            if until(job):
                return job
            time.sleep(0.05)

    def frames_digest(self, token, job, folder):
        data, _ = self.call("GET", job["output"]["url"], token, binary=True)
        path = os.path.join(folder, job["id"] + ".mp4")
        with open(path, "wb") as f:
            f.write(data)
        raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
        return hashlib.sha256(raw).hexdigest()

    def stop(self):
        self.process.terminate()
        self.process.wait(30)


def measure(binary, shares):
    with tempfile.TemporaryDirectory() as folder:
        box = Box(binary, folder, shares)
        try:
            long, short = clip(folder, LONG_FRAMES), clip(folder, 12)
            undisturbed = box.wait(ANN, box.submit(ANN, UPSCALE, long)["id"])
            expected = box.frames_digest(ANN, undisturbed, folder)
            running = box.submit(ANN, UPSCALE, long)["id"]
            box.wait(ANN, running, lambda j: j["status"] == "running" and (j.get("progress") or {}).get("done", 0) >= 60)
            asked = time.monotonic()
            _, headers = box.call("POST", "/v1/decode?model=wan21-small&shape=1&shape=16&shape=2&shape=2&shape=2", BOB, bytes(16 * 2 * 2 * 2 * 4), binary=True)
            decode_s = time.monotonic() - asked
            decode = box.job(BOB, headers["x-vaebox-job"])
            asked = time.monotonic()
            small = box.wait(BOB, box.submit(BOB, UPSCALE, short)["id"])
            short_s = time.monotonic() - asked
            whole = box.wait(ANN, running)
            same = box.frames_digest(ANN, whole, folder) == expected
            row = {
                "decode_wait_s": decode_s - decode["timings"]["total"], "decode_total_s": decode["timings"]["total"],
                "short_wait_s": short_s - small["timings"]["total"], "short_total_s": small["timings"]["total"],
                "long_undisturbed_s": undisturbed["timings"]["total"], "long_total_s": whole["timings"]["total"],
                "long_lent_s": whole["timings"].get("lent"), "same_frames": same,
            }
            try:
                box.wait(ANN, box.submit(ANN, UPSCALE, clip(folder, 90))["id"])
                six = clip(folder, 600)
                with open(six, "rb") as f:
                    estimate = box.call("POST", f"/v1/estimate?{UPSCALE}&filename=six.mp4", ANN, f.read())
                took = box.wait(ANN, box.submit(ANN, UPSCALE, six)["id"])["timings"]["total"]
                row.update(estimate_s=estimate["seconds"], took_s=took)
            except urllib.error.HTTPError as e:
                row.update(estimate_s=None, took_s=None, estimate_error=e.code)
            return row
        finally:
            box.stop()


def main():
    args = sys.argv[1:]
    runs = []
    while args:
        if args[0] == "--before" and len(args) > 1:
            runs.append((args[1], False))
            args = args[2:]
        else:
            runs.append((args[0], True))
            args = args[1:]
    runs = runs or [(os.path.join(ROOT, "target/release/vaebox"), True)]
    print(f"load at start: {os.getloadavg()[0]:.2f}")
    for binary, shares in runs:
        row = measure(binary, shares)
        print(binary)
        for key, value in row.items():
            print(f"  {key}: {value:.2f}" if isinstance(value, float) else f"  {key}: {value}")


if __name__ == "__main__":
    main()
