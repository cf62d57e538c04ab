#!/usr/bin/env python3
"""Run a Real-ESRGAN ncnn model with the real ncnn engine (PyPI `ncnn`) as the parity reference.

The engine runs on the CPU in fp32 (fp16/bf16 storage, arithmetic and packing off, Vulkan off), so
the only difference left against vaebox is summation order. The input is either a crop of an image
(read with PIL, RGB, scaled to [0, 1]) or a raw float32 CHW file. Outputs are raw little-endian
float32 in CHW order, unclamped; a JSON line on stdout gives the shapes and the timing.

    ncnn_reference.py --param M.param --bin M.bin --image astronaut.png --crop X,Y,W,H \
        --input-out in.f32 --output-out out.f32 [--warmup N] [--repeat N] [--threads 2]
"""
import argparse
import json
import statistics
import sys
import time

import ncnn
import numpy as np
from PIL import Image


def common_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every ncnn reference script takes: the model files, the input, where the output goes."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--param", required=True)
    p.add_argument("--bin", required=True)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--image", help="PNG/JPEG read with PIL and converted to RGB")
    source.add_argument("--input-raw", help="raw float32 CHW input (needs --shape C,H,W)")
    p.add_argument("--crop", help="X,Y,W,H crop of --image (default: whole image)")
    p.add_argument("--shape", help="C,H,W of --input-raw")
    p.add_argument("--input-out", help="write the exact float32 CHW frame read (before any padding) here")
    p.add_argument("--output-out", required=True, help="raw float32 CHW output")
    p.add_argument("--warmup", type=int, default=0, help="untimed forward passes before the timed ones")
    p.add_argument("--repeat", type=int, default=1, help="run the forward pass N times; report median and minimum")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--packing", action="store_true", help="allow fp32 pack4/pack8 layouts (faster)")
    return p


def read_input(args) -> np.ndarray:
    if args.input_raw:
        if not args.shape:
            sys.exit("--input-raw needs --shape C,H,W")
        shape = tuple(int(v) for v in args.shape.split(","))
        return np.fromfile(args.input_raw, dtype="<f4").reshape(shape)
    image = Image.open(args.image).convert("RGB")
    if args.crop:
        x, y, w, h = (int(v) for v in args.crop.split(","))
        if x < 0 or y < 0 or x + w > image.width or y + h > image.height:
            sys.exit(f"crop {args.crop} is outside the {image.width}x{image.height} image")
        image = image.crop((x, y, x + w, y + h))
    hwc = np.asarray(image, dtype=np.float32) / 255.0
    return np.ascontiguousarray(hwc.transpose(2, 0, 1))


def blob_names(param_path: str) -> tuple[str, str]:
    """The first Input layer's blob and the last layer's last output blob."""
    with open(param_path) as f:
        lines = [line.split() for line in f.read().splitlines()[2:] if line.strip()]
    input_blob = next(fields[4] for fields in lines if fields[0] == "Input")
    last = lines[-1]
    n_in, n_out = int(last[2]), int(last[3])
    output_blob = last[4 + n_in + n_out - 1]
    return input_blob, output_blob


def make_net(args) -> ncnn.Net:
    net = ncnn.Net()
    opt = net.opt
    opt.use_vulkan_compute = False
    opt.num_threads = args.threads
    # fp32 end to end: the reference must not round activations or weights beyond the file's fp16.
    opt.use_fp16_storage = False
    opt.use_fp16_packed = False
    opt.use_fp16_arithmetic = False
    opt.use_bf16_storage = False
    opt.use_int8_inference = False
    opt.use_packing_layout = args.packing
    if net.load_param(args.param) != 0:
        sys.exit(f"ncnn could not load {args.param}")
    if net.load_model(args.bin) != 0:
        sys.exit(f"ncnn could not load {args.bin}")
    return net


def run_timed(args, engine_input: np.ndarray, finish=lambda output: output):
    """The engine's output for `engine_input` (passed through `finish`), `args.repeat` times after
    `args.warmup` untimed runs: (output, seconds of the timed runs)."""
    net = make_net(args)
    input_blob, output_blob = blob_names(args.param)

    def forward():
        with net.create_extractor() as ex:
            ex.input(input_blob, ncnn.Mat(engine_input).clone())
            ret, out = ex.extract(output_blob)
            if ret != 0:
                sys.exit(f"ncnn extract of {output_blob} failed with {ret}")
            return finish(np.array(out, dtype=np.float32))

    for _ in range(args.warmup):
        forward()
    seconds = []
    output = None
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        output = forward()
        seconds.append(time.perf_counter() - start)
    return output, seconds


def report(args, chw: np.ndarray, output: np.ndarray, seconds: list, **extra):
    """Writes the output and prints the run as one JSON line."""
    np.ascontiguousarray(output).astype("<f4").tofile(args.output_out)
    print(json.dumps({
        "input_shape": list(chw.shape),
        **extra,
        "output_shape": list(output.shape),
        "median_seconds": statistics.median(seconds),
        # The minimum is the least disturbed by other processes on a shared machine.
        "min_seconds": min(seconds),
        "repeat": len(seconds),
        "ncnn_version": ncnn.__version__,
    }))


def main():
    args = common_parser(__doc__).parse_args()
    chw = read_input(args)
    if args.input_out:
        chw.astype("<f4").tofile(args.input_out)
    output, seconds = run_timed(args, chw)
    report(args, chw, output, seconds)


if __name__ == "__main__":
    main()
