#!/usr/bin/env python3
"""Peak memory of diffusers' own `AutoencoderKLWan.decode` (its frame-by-frame decode, no tiling),
measured as vaebox measures its runs (src/bench/tiling/measure.rs), so the two can be compared:

- tensors of 64 KiB and more get their own mappings (`mallopt(M_MMAP_THRESHOLD, 64 KiB)`, set before torch
  loads), so RSS follows live tensors;
- one warm-up decode of the same latent pays the one-time costs;
- then `malloc_trim(0)`, `VmHWM` reset through /proc/self/clear_refs, the measured decode, and the
  growth of `VmHWM` over the RSS before it.

Prints one JSON line: peak_bytes (growth), baseline_bytes, seconds, output shape and bytes. Example:
    diffusers_decode_memory.py --weights w.safetensors --keymap keymap.json --config-json '{"base_dim": 12}' \
        --latent-frames 12 --latent-height 16 --latent-width 22
"""
import argparse
import ctypes
import json
import sys
import time

M_MMAP_THRESHOLD = -3
LIBC = ctypes.CDLL("libc.so.6")
# Before torch is imported, as vaebox sets it before libtorch allocates anything.
LIBC.mallopt(M_MMAP_THRESHOLD, 64 << 10)

import torch  # noqa: E402
from diffusers_tiled_decode import load_model  # noqa: E402  (same folder: one way to build the model)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weights", required=True)
    p.add_argument("--keymap", help="JSON object original name -> diffusers name (omit for diffusers weights)")
    p.add_argument("--config-json", default="{}", help="AutoencoderKLWan keyword arguments")
    p.add_argument("--latent-frames", type=int, required=True)
    p.add_argument("--latent-height", type=int, required=True)
    p.add_argument("--latent-width", type=int, required=True)
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args()


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args)
    z_dim = model.config.z_dim
    generator = torch.Generator().manual_seed(0)
    latent = torch.randn(1, z_dim, args.latent_frames, args.latent_height, args.latent_width, generator=generator)
    with torch.inference_mode():
        model.decode(latent)
        LIBC.malloc_trim(0)
        reset_peak_rss()
        baseline = peak_rss_bytes()
        started = time.perf_counter()
        output = model.decode(latent).sample
        seconds = time.perf_counter() - started
        peak = peak_rss_bytes()
    result = {
        "peak_bytes": peak - baseline,
        "baseline_bytes": baseline,
        "seconds": seconds,
        "output_shape": list(output.shape),
        "output_bytes": output.numel() * output.element_size(),
        "torch": torch.__version__,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
