#!/usr/bin/env python3
"""diffusers side of `vaebox bench vae`: time AutoencoderKLWan encode/decode on given weights and input.

Modes (exactly one of them per call, or the default timing mode):
    --make-weights OUT.safetensors   random-init the model (fixed seed), perturb every tensor so none is
                                     all-zero or all-one, save with diffusers names
    --make-input OUT.safetensors     `video` [1, 3, F, H, W] in [-1, 1] and `latent` [1, z, F', H/s, W/s]
    --matmul-peak                    fp32 and bf16 GFLOP/s of a large square matmul at --threads
                                     (best of repeated runs over a few seconds per dtype); with a CUDA
                                     --device: on that device (size 8192 unless --matmul-size, best of a
                                     few timed runs, each bracketed by torch.cuda.synchronize), f32 with
                                     TF32 off, plus `tf32_gflops` with TF32 on
    --serve                          load --weights/--input once, then answer one command per stdin
                                     line with one JSON line, so a caller can interleave its own runs
                                     with ours under the same machine load:
                                       warmup OP   run once under FlopCounterMode -> {"flops": N}
                                       time OP     one timed run -> {"seconds": S}; on a CUDA --device
                                                   also "peak_device_bytes" (max_memory_allocated
                                                   of the run, peak stats reset just before it)
                                       save PATH   save `mu`/`sample` (float32, on the CPU) of the last runs
                                       quit
    (default)                        load --weights and --input, warm up (counting FLOPs with
                                     torch.utils.flop_counter.FlopCounterMode), time --repeats runs of
                                     encode (latent_dist.mean) and decode (tiling and slicing off)

OP is encode or decode. Every mode prints one JSON line on stdout (per command with --serve);
progress goes to stderr.

Device options (CPU behaviour and output are unchanged when neither is given):
    --device cpu|cuda|cuda:N         where the model, its inputs and --matmul-peak run (default cpu;
                                     --make-weights and --make-input always run on the CPU). On CUDA
                                     every warm-up and timed run is bracketed by torch.cuda.synchronize;
                                     a run's input is copied to the device before the clock starts and
                                     its output back to the CPU after it stops, so the device holds only
                                     the weights and the current run's tensors (what peak_device_bytes
                                     counts). CUDA adds `device`, `device_name` and `tf32` to the JSON
                                     of --serve's ready line and of the timing and --matmul-peak modes,
                                     and `peak_device_bytes` per op to the timing mode.
    --tf32 on|off                    torch.backends.cuda.matmul.allow_tf32 and
                                     torch.backends.cudnn.allow_tf32 (default off: both set False);
                                     CUDA only, `on` with --device cpu is an error

Example:
    diffusers_vae.py --preset wan2.1 --weights w.safetensors --input in.safetensors \
        --dtype bf16 --threads 2 --repeats 3 --save-outputs out.safetensors
"""
import argparse
import json
import math
import re
import statistics
import sys
import time

import torch
from safetensors.torch import load_file, save_file

# Keyword arguments of AutoencoderKLWan; anything not given keeps the diffusers default (= Wan 2.1).
PRESETS = {
    "wan2.1": {},
    "wan2.2": {
        "base_dim": 160,
        "decoder_base_dim": 256,
        "z_dim": 48,
        "is_residual": True,
        "patch_size": 2,
        "in_channels": 12,
        "out_channels": 12,
        "scale_factor_spatial": 16,
    },
    # A narrow Wan 2.1 for smoke tests of the bench itself (seconds instead of minutes).
    "wan2.1-tiny": {"base_dim": 12},
}

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
CPU_MATMUL_SIZE = 2048
CUDA_MATMUL_SIZE = 8192
CUDA_MATMUL_RUNS = 5
OPS = ("encode", "decode")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    config = p.add_mutually_exclusive_group()
    config.add_argument("--preset", choices=sorted(PRESETS), default="wan2.1")
    config.add_argument("--config-json", help="JSON object of AutoencoderKLWan keyword arguments")
    p.add_argument("--weights", help="safetensors in diffusers naming")
    p.add_argument("--input", help="safetensors with `video` and `latent` (from --make-input)")
    p.add_argument("--make-weights", metavar="OUT")
    p.add_argument("--make-input", metavar="OUT")
    p.add_argument("--matmul-peak", action="store_true")
    p.add_argument("--serve", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--frames", type=int, default=9)
    p.add_argument("--height", type=int, default=128)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ops", default="encode,decode", help="comma list of encode, decode")
    p.add_argument("--save-outputs", metavar="OUT", help="save `mu` and `sample` (float32) of the last run")
    p.add_argument("--matmul-size", type=int, default=None,
                   help=f"side of the --matmul-peak matrices (default {CPU_MATMUL_SIZE} on the CPU, {CUDA_MATMUL_SIZE} on CUDA)")
    p.add_argument("--matmul-seconds", type=float, default=3.0, help="time budget per dtype of --matmul-peak (CPU)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--tf32", choices=("on", "off"), default="off",
                   help="allow TF32 in CUDA matmuls and convolutions (default off; CUDA only)")
    return p.parse_args()


def resolve_device(args) -> torch.device:
    """The --device as a torch.device with an explicit index on CUDA; exits with a message if unusable."""
    name = args.device.strip()
    if not re.fullmatch(r"cpu|cuda(:\d+)?", name):
        raise SystemExit(f"--device `{args.device}`: expected cpu, cuda or cuda:N")
    if name == "cpu":
        if args.tf32 == "on":
            raise SystemExit("--tf32 on needs a CUDA --device (TF32 is a CUDA setting; on the CPU f32 is f32)")
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: CUDA is not available (torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    index = int(name.split(":")[1]) if ":" in name else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise SystemExit(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s)")
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    set_tf32(args.tf32 == "on")
    return device


def set_tf32(allow: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


def is_cuda(device: torch.device) -> bool:
    return device.type == "cuda"


def cuda_info(args, device: torch.device) -> dict:
    """What a CUDA run adds to the JSON (nothing on the CPU, so CPU replies stay as they were)."""
    if not is_cuda(device):
        return {}
    return {"device": str(device), "device_name": torch.cuda.get_device_name(device), "tf32": args.tf32}


def model_config(args) -> dict:
    if args.config_json:
        return json.loads(args.config_json)
    return dict(PRESETS[args.preset])


def build_model(config: dict):
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(**config).eval()


def make_weights(args, config: dict) -> dict:
    torch.manual_seed(args.seed)
    model = build_model(config)
    generator = torch.Generator().manual_seed(args.seed + 1)
    state = {}
    for name, tensor in model.state_dict().items():
        # Default init leaves biases at zero and RMS gammas at one; a perturbation makes every tensor
        # matter, so a loader that skips or swaps one shows up in the output difference.
        noise = torch.randn(tensor.shape, generator=generator) * 0.05
        state[name] = (tensor.float() + noise).contiguous()
    save_file(state, args.make_weights)
    parameters = sum(t.numel() for t in state.values())
    return {"mode": "make-weights", "path": args.make_weights, "tensors": len(state), "parameters": parameters}


def latent_shape(config: dict, frames: int, height: int, width: int):
    z_dim = config.get("z_dim", 16)
    spatial = config.get("scale_factor_spatial", 8)
    temporal = config.get("scale_factor_temporal", 4)
    return [1, z_dim, 1 + (frames - 1) // temporal, height // spatial, width // spatial]


def make_input(args, config: dict) -> dict:
    generator = torch.Generator().manual_seed(args.seed + 2)
    channels = 3
    video = torch.rand([1, channels, args.frames, args.height, args.width], generator=generator) * 2 - 1
    latent = torch.randn(latent_shape(config, args.frames, args.height, args.width), generator=generator)
    save_file({"video": video.contiguous(), "latent": latent.contiguous()}, args.make_input)
    return {"mode": "make-input", "path": args.make_input, "video": list(video.shape), "latent": list(latent.shape)}


def matmul_peak(args) -> dict:
    n = args.matmul_size or CPU_MATMUL_SIZE
    result = {"mode": "matmul-peak", "threads": torch.get_num_threads(), "size": n}
    for label, dtype in DTYPES.items():
        a = torch.randn(n, n).to(dtype)
        b = torch.randn(n, n).to(dtype)
        for _ in range(2):
            torch.mm(a, b)
        # The best run, not the median: the peak is what the CPU can do, and other load only slows it.
        best = float("inf")
        deadline = time.perf_counter() + args.matmul_seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - start)
        result[f"{label}_gflops"] = 2 * n**3 / best / 1e9
    return result


def matmul_peak_cuda(args, device: torch.device) -> dict:
    """f32 (TF32 off), tf32 (TF32 on) and bf16 GFLOP/s of one square matmul on `device`.

    Each timed run is `inner` back-to-back matmuls between two synchronizes (so launch latency and the
    synchronize itself are small against the run), `inner` picked from a warm-up to make a run about
    50 ms; the best of CUDA_MATMUL_RUNS runs counts, as on the CPU.
    """
    n = args.matmul_size or CUDA_MATMUL_SIZE
    result = {"mode": "matmul-peak", "threads": torch.get_num_threads(), "size": n, **cuda_info(args, device)}
    for label, dtype, tf32 in (("f32", torch.float32, False), ("tf32", torch.float32, True), ("bf16", torch.bfloat16, None)):
        if tf32 is not None:
            set_tf32(tf32)
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        torch.cuda.synchronize(device)
        for _ in range(3):
            torch.mm(a, b)
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        torch.mm(a, b)
        torch.cuda.synchronize(device)
        once = time.perf_counter() - start
        inner = max(1, min(100, math.ceil(0.05 / max(once, 1e-6))))
        best = float("inf")
        for _ in range(CUDA_MATMUL_RUNS):
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            for _ in range(inner):
                torch.mm(a, b)
            torch.cuda.synchronize(device)
            best = min(best, (time.perf_counter() - start) / inner)
        result[f"{label}_gflops"] = 2 * n**3 / best / 1e9
        log(f"matmul {label} {n}: {result[f'{label}_gflops']:.0f} GFLOP/s ({inner} per run)")
        del a, b
    set_tf32(args.tf32 == "on")
    torch.cuda.empty_cache()
    return result


def run_op(model, op: str, tensor: torch.Tensor) -> torch.Tensor:
    if op == "encode":
        return model.encode(tensor).latent_dist.mean
    return model.decode(tensor).sample


def count_flops_and_warm_up(model, op: str, tensor: torch.Tensor):
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        output = run_op(model, op, tensor)
    return counter.get_total_flops(), output


class LoadedModel:
    """The model at one dtype with its two inputs, and the outputs of its latest runs.

    On CUDA the model lives on the device; the inputs and outputs stay on the CPU and a run's input is
    copied over before its clock starts (and its output back after it stops), so the device holds only
    the weights and the one run's tensors.
    """

    def __init__(self, args, config: dict, device: torch.device):
        self.dtype_name = args.dtype
        self.device = device
        dtype = DTYPES[args.dtype]
        model = build_model(config)
        model.load_state_dict(load_file(args.weights), strict=True)
        self.model = model.to(dtype)
        if is_cuda(device):
            self.model = self.model.to(device)
        self.model.disable_tiling()
        self.model.disable_slicing()
        inputs = load_file(args.input)
        self.inputs = {"encode": inputs["video"].to(dtype), "decode": inputs["latent"].to(dtype)}
        self.outputs = {}
        # max_memory_allocated of the latest timed run on CUDA; None on the CPU.
        self.peak_device_bytes = None

    def _check(self, op: str):
        if op not in OPS:
            raise ValueError(f"unknown op `{op}` (expected one of {OPS})")

    def warm_up(self, op: str) -> int:
        self._check(op)
        log(f"diffusers {op} {self.dtype_name}: warm-up with FLOP counting")
        if not is_cuda(self.device):
            flops, output = count_flops_and_warm_up(self.model, op, self.inputs[op])
            self.outputs[op] = output
            return flops
        torch.cuda.synchronize(self.device)
        tensor = self.inputs[op].to(self.device)
        flops, output = count_flops_and_warm_up(self.model, op, tensor)
        torch.cuda.synchronize(self.device)
        del tensor
        self.outputs[op] = output.cpu()
        return flops

    def time(self, op: str) -> float:
        self._check(op)
        if not is_cuda(self.device):
            start = time.perf_counter()
            self.outputs[op] = run_op(self.model, op, self.inputs[op])
            return time.perf_counter() - start
        device = self.device
        torch.cuda.synchronize(device)
        # From here the peak counts the weights, the input, the run's activations and its output.
        torch.cuda.reset_peak_memory_stats(device)
        tensor = self.inputs[op].to(device)
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        output = run_op(self.model, op, tensor)
        torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
        self.peak_device_bytes = torch.cuda.max_memory_allocated(device)
        del tensor
        self.outputs[op] = output.cpu()
        return seconds

    def save(self, path: str):
        names = {"encode": "mu", "decode": "sample"}
        save_file({names[op]: out.to(device="cpu", dtype=torch.float32).contiguous() for op, out in self.outputs.items()}, path)


def time_ops(args, config: dict, device: torch.device) -> dict:
    loaded = LoadedModel(args, config, device)
    result = {"mode": "time", "dtype": args.dtype, "threads": torch.get_num_threads(), "repeats": args.repeats, "config": config}
    result.update(cuda_info(args, device))
    with torch.inference_mode():
        for op in [o for o in args.ops.split(",") if o]:
            flops = loaded.warm_up(op)
            times = []
            peaks = []
            for i in range(args.repeats):
                times.append(loaded.time(op))
                peaks.append(loaded.peak_device_bytes)
                log(f"diffusers {op} {args.dtype}: run {i + 1}/{args.repeats} {times[-1]:.3f} s")
            output = loaded.outputs[op]
            result[op] = {"median_s": statistics.median(times), "times_s": times, "flops": flops, "output_shape": list(output.shape)}
            if is_cuda(device):
                result[op]["peak_device_bytes"] = max(peaks, default=None)
    if args.save_outputs:
        loaded.save(args.save_outputs)
        result["outputs"] = args.save_outputs
    return result


def serve(args, config: dict, device: torch.device):
    loaded = LoadedModel(args, config, device)
    reply({"ready": True, "dtype": args.dtype, "threads": torch.get_num_threads(), "torch": torch.__version__, "config": config, **cuda_info(args, device)})
    with torch.inference_mode():
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            command, rest = words[0], words[1:]
            try:
                if command == "quit":
                    reply({"bye": True})
                    return
                elif command == "warmup":
                    reply({"flops": loaded.warm_up(rest[0])})
                elif command == "time":
                    seconds = loaded.time(rest[0])
                    if is_cuda(device):
                        reply({"seconds": seconds, "peak_device_bytes": loaded.peak_device_bytes})
                    else:
                        reply({"seconds": seconds})
                elif command == "save":
                    loaded.save(rest[0])
                    reply({"saved": rest[0]})
                else:
                    reply({"error": f"unknown command `{command}`"})
            except Exception as error:  # the caller gets the reason on its one reply line
                reply({"error": f"{type(error).__name__}: {error}"})


def reply(message: dict):
    print(json.dumps(message), flush=True)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args)
    config = model_config(args)
    if args.make_weights:
        result = make_weights(args, config)
    elif args.make_input:
        result = make_input(args, config)
    elif args.matmul_peak:
        result = matmul_peak_cuda(args, device) if is_cuda(device) else matmul_peak(args)
    elif args.serve:
        if not (args.weights and args.input):
            raise SystemExit("--serve needs --weights and --input")
        serve(args, config, device)
        return
    else:
        if not (args.weights and args.input):
            raise SystemExit("timing needs --weights and --input")
        result = time_ops(args, config, device)
    result["torch"] = torch.__version__
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
