#!/usr/bin/env python3
"""The GPU check's job step (docs/gpu.md): every op as a user sends it, then the same model bare.

Serves the kit's binary on the device and sends real clips over HTTP, each job twice (the first loads the
model and tunes cuDNN, the second is the figure, as on a busy box): upscale with animevideov3 ×2 and
Real-CUGAN SE ×2, interpolate ×2, restore with the 3B DiT ×2 (21 frames to 1280×720, the shape of the
`restore_3b` bench), vae_decode as a job and through `/v1/decode` (diffusers' remote_decode, the latent
of the `vae_wan21_bf16` bench), restore with FlashVSR-Tiny (the `flashvsr` step's random full-size weights,
its clip's frames at a quarter of its output size). Then the bare models on the same frames and shapes: `vaebox bench upscale
--device D` and `vaebox bench interpolate --device D` here, the VAE decode and the restore's stages from
the logs of the `vae_wan21_bf16`, `restore_3b` and `flashvsr` steps when they ran. Prints one JSON line per job and
one per comparison (`{"job_vs_bare": ...}`: job compute per frame, bare per frame, their ratio), which
report.py gathers.

    jobs.py --bin BIN --mode cuda --work /tmp/vaebox-check --models KIT/models --python python3 --latent-shape 1,16,21,60,104 \
        --wan21 W.safetensors --seedvr2-vae V.safetensors --dit D.safetensors --text-embeds T.safetensors
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

# (width, height, frames) of the clips: full size on a GPU, small on the CPU (the kit's dry run).
SIZES = {
    "cuda": {"clip": (1280, 720, 96), "restore": (640, 360, 21), "flashvsr": (352, 192, 41)},
    "cpu": {"clip": (48, 32, 64), "restore": (32, 32, 5), "flashvsr": (32, 32, 25)},
}
# (name, folder, the files' common start): a model is served when all its files are there (animevideov3's
# entry holds its three scales).
UPSCALERS = [("realesrgan-animevideov3", "realesrgan", "REALESRGAN_ANIMAVIDEOV3_UP"), ("realcugan-se-2x", "realcugan", "REALCUGAN_SE_UP2X.")]
DTYPE = "bf16"


def log(message):
    print(message, file=sys.stderr, flush=True)


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *args], check=True)


def make_clip(path, width, height, frames):
    """Moving test pictures with detail at every scale, as x264 at high quality (what a user uploads)."""
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={width}x{height}:rate=24", "-frames:v", str(frames),
           "-c:v", "libx264", "-preset", "veryfast", "-crf", "16", "-pix_fmt", "yuv420p", path)


def make_latent(path, shape):
    import torch
    from safetensors.torch import save_file
    torch.manual_seed(0)
    save_file({"latent": torch.randn(shape)}, path)


def make_prompt(path):
    """FlashVSR's `posi_prompt.pth`: its fixed text context, [1, 512, 4096], torch-saved as the authors ship it."""
    import torch
    torch.manual_seed(0)
    torch.save(torch.randn(1, 512, 4096), path)


def link(source, target):
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.lexists(target):
        os.remove(target)
    os.symlink(os.path.abspath(source), target)


class Box:
    def __init__(self, url):
        self.url = url

    def call(self, method, path, body=None, timeout=600):
        request = urllib.request.Request(self.url + path, data=body, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{method} {path}: {error.code} {error.read()[:500].decode(errors='replace')}") from None

    def run(self, query, body, timeout=600):
        """Submits a job, waits for its end; the job's record and the wall seconds from upload to end."""
        began = time.time()
        job = self.call("POST", "/v1/jobs?" + urllib.parse.urlencode(query), body)
        while job["status"] in ("queued", "running"):
            if time.time() - began > timeout:
                raise RuntimeError(f"{query}: still {job['status']} after {timeout} s")
            time.sleep(0.05)
            job = self.call("GET", f"/v1/jobs/{job['id']}")
        if job["status"] != "succeeded":
            raise RuntimeError(f"{query}: {job['status']}: {job.get('error')}")
        return job, time.time() - began


def serve(args, models, data):
    env = dict(os.environ, VAEBOX_LISTEN="127.0.0.1:18090", VAEBOX_DATA_DIR=data, VAEBOX_MODELS_DIR=models,
               VAEBOX_DEVICE=args.mode, VAEBOX_THREADS=str(args.threads))
    server = subprocess.Popen([args.bin, "serve"], env=env, stdout=open(os.path.join(args.work, "jobs-server.log"), "w"), stderr=subprocess.STDOUT)
    box = Box("http://127.0.0.1:18090")
    for _ in range(120):
        if server.poll() is not None:
            raise RuntimeError("the server stopped at start-up: see jobs-server.log")
        try:
            box.call("GET", "/healthz", timeout=2)
            return server, box
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("the server did not answer /healthz in 60 s")


def job_line(name, job, wall, frames_made):
    t = job["timings"]
    record = {"job": name, "wall_s": round(wall, 3), "frames": frames_made, "device": t.get("device"), "dtype": t.get("dtype")}
    for key in ("load_model", "read", "compute", "write", "total", "encode", "dit", "decode", "color_fix", "fps", "peak_device_bytes"):
        if t.get(key) is not None:
            record[key] = t[key]
    if frames_made and t.get("compute"):
        record["compute_s_per_frame"] = t["compute"] / frames_made
        record["compute_fps"] = frames_made / t["compute"]
    print(json.dumps(record), flush=True)
    return record


def twice(box, name, query, body, frames_of):
    """The second run is the figure: the first loaded the model and tuned the kernels."""
    box.run(query, body)
    job, wall = box.run(query, body)
    return job_line(name, job, wall, frames_of(job))


def plan_frames(job):
    """The frames a VAE job made, as its plan records them."""
    return (job.get("plan") or {}).get("frames")


def table_value(log_text, first_cells, header):
    """The cell under `header` in the first markdown row whose leading cells are `first_cells`."""
    head = None
    for line in log_text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header in cells:
            head = cells
        elif head and cells[:len(first_cells)] == first_cells:
            match = re.match(r"[-0-9.e]+", cells[head.index(header)])
            return float(match.group()) if match else None
    return None


def compare(job, bare, what):
    """One comparison line: the job's compute per frame against the bare model's, and their ratio."""
    if job is None or bare is None or not job.get("compute_s_per_frame"):
        print(json.dumps({"job_vs_bare": job and job["job"], "what": what, "missing": "job" if not job else "bare"}), flush=True)
        return
    ratio = job["compute_s_per_frame"] / bare
    print(json.dumps({"job_vs_bare": job["job"], "what": what, "job_s_per_frame": round(job["compute_s_per_frame"], 5),
                      "bare_s_per_frame": round(bare, 5), "ratio": round(ratio, 2)}), flush=True)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("--mode", choices=["cuda", "cpu"], required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--models", required=True, help="a folder with realesrgan/, realcugan/ and rife/ as the kit or setup brings them")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--latent-shape", required=True, help="the Wan 2.1 decode's latent, 1,16,t,h,w (random, made here)")
    p.add_argument("--wan21", required=True)
    p.add_argument("--seedvr2-vae", required=True)
    p.add_argument("--dit", required=True, help="the 3B DiT's weights (random, full size on a GPU)")
    p.add_argument("--text-embeds", required=True)
    p.add_argument("--flashvsr", default="", help="a FlashVSR model folder of the `flashvsr` step (skipped when absent)")
    p.add_argument("--only", default="", help="comma list of upscale,interpolate,vae_decode,restore,flashvsr (default: all)")
    args = p.parse_args()
    only = set(filter(None, args.only.split(",")))
    wanted = lambda op: not only or op in only
    root = os.path.join(args.work, "jobs")
    shutil.rmtree(root, ignore_errors=True)
    models, data = os.path.join(root, "models"), os.path.join(root, "data")
    for name, folder, start in UPSCALERS:
        for file in os.listdir(os.path.join(args.models, folder)):
            if file.startswith(start):
                link(os.path.join(args.models, folder, file), os.path.join(models, folder, file))
    link(os.path.join(args.models, "rife", "flownet.safetensors"), os.path.join(models, "rife", "flownet.safetensors"))
    link(args.wan21, os.path.join(models, "vae", "wan_2.1_vae.safetensors"))
    link(args.seedvr2_vae, os.path.join(models, "vae", "ema_vae_fp16.safetensors"))
    link(args.dit, os.path.join(models, "dit", "seedvr2_ema_3b.safetensors"))
    link(args.text_embeds, os.path.join(models, "dit", "text_embeds.safetensors"))
    flashvsr = os.path.isdir(args.flashvsr) and wanted("flashvsr")
    if flashvsr:
        folder = os.path.join(models, "flashvsr", os.path.basename(args.flashvsr.rstrip("/")))
        for file in os.listdir(args.flashvsr):
            link(os.path.join(args.flashvsr, file), os.path.join(folder, file))
        make_prompt(os.path.join(folder, "posi_prompt.pth"))
    sizes = SIZES[args.mode]
    flashvsr_in = os.path.join(root, "flashvsr_in.mp4")
    make_clip(flashvsr_in, *sizes["flashvsr"])
    flashvsr_bytes = open(flashvsr_in, "rb").read()
    clip, small = os.path.join(root, "clip.mp4"), os.path.join(root, "restore_in.mp4")
    make_clip(clip, *sizes["clip"])
    make_clip(small, *sizes["restore"])
    clip_bytes, small_bytes = open(clip, "rb").read(), open(small, "rb").read()
    latent = os.path.join(root, "latent.safetensors")
    make_latent(latent, [int(d) for d in args.latent_shape.split(",")])
    latent_bytes = open(latent, "rb").read()
    frames = sizes["clip"][2]

    server, box = serve(args, models, data)
    jobs = {}
    failed = False
    try:
        steps = [
            *[("upscale", f"upscale {name} x2", {"op": "upscale", "model": name, "scale": 2, "dtype": DTYPE, "filename": "clip.mp4"}, clip_bytes, lambda job: frames) for name, _, _ in UPSCALERS],
            ("interpolate", "interpolate rife x2", {"op": "interpolate", "model": "rife-hdv3", "factor": 2, "dtype": DTYPE, "filename": "clip.mp4"}, clip_bytes, lambda job: frames - 1),
            ("vae_decode", "vae_decode wan_2.1_vae job", {"op": "vae_decode", "model": "wan_2.1_vae", "dtype": DTYPE, "output_format": "safetensors", "filename": "latent.safetensors"}, latent_bytes, plan_frames),
            ("restore", "restore seedvr2_ema_3b x2", {"op": "restore", "model": "seedvr2_ema_3b", "scale": 2, "dtype": DTYPE, "filename": "restore_in.mp4"}, small_bytes, lambda job: sizes["restore"][2]),
        ]
        if flashvsr:
            name = os.path.basename(args.flashvsr.rstrip("/"))
            steps.append(("flashvsr", "restore flashvsr tiny x4", {"op": "restore", "model": name, "dtype": DTYPE, "filename": "flashvsr_in.mp4"}, flashvsr_bytes, plan_frames))
        for op, name, query, body, frames_of in steps:
            if not wanted(op):
                continue
            try:
                jobs[name] = twice(box, name, query, body, frames_of)
            except Exception as error:  # a failing job is recorded; the next one runs
                failed = True
                print(json.dumps({"job": name, "error": str(error)}), flush=True)
        if wanted("vae_decode"):
            out = os.path.join(args.work, "remote_decode.json")
            remote = [args.python, "scripts/gpu/remote_decode_smoke.py", "--url", box.url, "--model", "wan_2.1_vae", "--latent", latent, "--out", out]
            for _ in range(2):
                done = subprocess.run(remote, stdout=sys.stderr)
            failed |= done.returncode != 0
            smoke = json.loads(read(out) or "{}")
            if smoke.get("ok"):
                job = box.call("GET", f"/v1/jobs/{smoke['job']}")
                jobs["/v1/decode wan_2.1_vae"] = job_line("/v1/decode wan_2.1_vae", job, smoke["seconds"], plan_frames(job))
    finally:
        server.terminate()
        server.wait(timeout=30)

    # The bare models on the same frames and shapes.
    if wanted("upscale"):
        for name, _, _ in UPSCALERS:
            bench = subprocess.run([args.bin, "bench", "upscale", "--device", args.mode, "--dtypes", DTYPE, "--input", clip, "--model", name, "--scale", "2",
                                    "--media-priorities", "normal", "--frame-workers", "1", "--no-engines"],
                                   env=dict(os.environ, VAEBOX_MODELS_DIR=models, VAEBOX_THREADS=str(args.threads)), capture_output=True, text=True)
            print(bench.stdout, flush=True)
            log(bench.stderr[-3000:])
            failed |= bench.returncode != 0
            # The row of the server's own chunk length (4 frames, the default).
            compare(jobs.get(f"upscale {name} x2"), table_value(bench.stdout, [DTYPE, "4"], "bare model s/frame"), f"{name}: bare model, chunks of 4 frames")
    if wanted("interpolate"):
        bench = subprocess.run([args.bin, "bench", "interpolate", "--device", args.mode, "--small-input", clip, "--large-input", clip, "--rounds", "1", "--no-reference"],
                               env=dict(os.environ, VAEBOX_MODELS_DIR=models, VAEBOX_THREADS=str(args.threads)), capture_output=True, text=True)
        print(bench.stdout, flush=True)
        log(bench.stderr[-3000:])
        failed |= bench.returncode != 0
        compare(jobs.get("interpolate rife x2"), whole_frame_seconds(bench.stdout), "RIFE bf16 channels-last, one made frame of the clip's size")
    step_logs = os.path.join(args.work, "steps")
    vae_log = read(os.path.join(step_logs, "vae_wan21_bf16.log"))
    decode = table_value(vae_log, ["bf16", "decode"], "ours median s (best)")
    latent_frames = (jobs.get("vae_decode wan_2.1_vae job") or {}).get("frames")
    for name in ("vae_decode wan_2.1_vae job", "/v1/decode wan_2.1_vae"):
        compare(jobs.get(name), decode / latent_frames if decode and latent_frames else None, "bench vae decode (vae_wan21_bf16 step), same latent shape")
    restore_log = read(os.path.join(step_logs, "restore_3b.log"))
    bare_total = table_value(restore_log, ["bf16"], "total s/frame")
    compare(jobs.get("restore seedvr2_ema_3b x2"), bare_total, "bench restore total (restore_3b step), 21 frames to 1280×720")
    for stage, header in (("encode", "encode s/frame"), ("dit", "DiT s/frame"), ("decode", "decode s/frame")):
        job = jobs.get("restore seedvr2_ema_3b x2")
        bare = table_value(restore_log, ["bf16"], header)
        if job and job.get(stage) is not None and bare:
            stage_per_frame = job[stage] / job["frames"]
            print(json.dumps({"job_vs_bare": job["job"], "what": f"restore stage {stage}", "job_s_per_frame": round(stage_per_frame, 5),
                              "bare_s_per_frame": bare, "ratio": round(stage_per_frame / bare, 2)}), flush=True)
    flashvsr_log = read(os.path.join(step_logs, "flashvsr.log"))
    job = jobs.get("restore flashvsr tiny x4")
    compare(job, table_value(flashvsr_log, ["block-sparse", str(sizes["flashvsr"][2])], "whole run s/frame"), "bench flashvsr whole run (flashvsr step), the same frames and size")
    if job and job.get("total") and job.get("frames"):
        # Beside the compute: the whole job (reading, Pillow's bicubic ×4 on the host, writing) per frame.
        print(json.dumps({"job": job["job"], "total_s_per_frame": round(job["total"] / job["frames"], 5), "total_fps": round(job["frames"] / job["total"], 2)}), flush=True)
    return 1 if failed else 0


def whole_frame_seconds(text):
    """`bench interpolate`'s bf16 channels-last median on the clip's whole frame (its second pair)."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 4 and cells[0] == "bigbuckbunny whole frame" and cells[2] == "vaebox bf16 channels-last":
            return float(cells[4])
    return None


if __name__ == "__main__":
    sys.exit(main())
