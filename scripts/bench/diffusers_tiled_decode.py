#!/usr/bin/env python3
"""diffusers' own spatial tiling of AutoencoderKLWan, as the reference for vaebox's tiled VAE error.

Loads the given weights (diffusers naming, or original Wan naming plus --keymap), runs the op once with
`enable_tiling(...)` at the given tile geometry and once untiled, and saves both outputs (float32):
    decode: `tiled`, `untiled` = `decode(latent).sample` (clamped, as diffusers returns it)
    encode: `tiled`, `untiled` = `encode(video).latent_dist.mean`
Prints one JSON line with the max/mean abs difference between them. Example:
    diffusers_tiled_decode.py --weights w.safetensors --keymap keymap.json --config-json '{"base_dim": 12}' \
        --input case.safetensors --input-key latent --op decode \
        --tile-sample-min-height 80 --tile-sample-min-width 80 \
        --tile-sample-stride-height 48 --tile-sample-stride-width 48 --out out.safetensors
"""
import argparse
import json
import sys

import torch
from safetensors.torch import load_file, save_file


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weights", required=True)
    p.add_argument("--keymap", help="JSON object original name -> diffusers name (omit for diffusers weights)")
    p.add_argument("--config-json", default="{}", help="AutoencoderKLWan keyword arguments")
    p.add_argument("--input", required=True, help="safetensors holding the input tensor")
    p.add_argument("--input-key", required=True)
    p.add_argument("--op", choices=["decode", "encode"], default="decode")
    p.add_argument("--tile-sample-min-height", type=int, required=True)
    p.add_argument("--tile-sample-min-width", type=int, required=True)
    p.add_argument("--tile-sample-stride-height", type=int, required=True)
    p.add_argument("--tile-sample-stride-width", type=int, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", required=True)
    return p.parse_args()


def load_model(args):
    from diffusers import AutoencoderKLWan

    model = AutoencoderKLWan(**json.loads(args.config_json)).eval()
    state = load_file(args.weights)
    if args.keymap:
        with open(args.keymap) as f:
            keymap = json.load(f)
        state = {keymap[name]: tensor for name, tensor in state.items()}
    model.load_state_dict(state, strict=True)
    return model


def run(model, op: str, tensor: torch.Tensor) -> torch.Tensor:
    if op == "encode":
        return model.encode(tensor).latent_dist.mean
    return model.decode(tensor).sample


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args)
    tensor = load_file(args.input)[args.input_key].float()
    with torch.inference_mode():
        model.disable_tiling()
        untiled = run(model, args.op, tensor).float().contiguous()
        model.enable_tiling(
            tile_sample_min_height=args.tile_sample_min_height,
            tile_sample_min_width=args.tile_sample_min_width,
            tile_sample_stride_height=args.tile_sample_stride_height,
            tile_sample_stride_width=args.tile_sample_stride_width,
        )
        tiled = run(model, args.op, tensor).float().contiguous()
    save_file({"tiled": tiled, "untiled": untiled}, args.out)
    difference = (tiled - untiled).abs()
    result = {
        "op": args.op,
        "out": args.out,
        "shape": list(tiled.shape),
        "max_abs": difference.max().item(),
        "mean_abs": difference.mean().item(),
        "torch": torch.__version__,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
