#!/usr/bin/env python3
"""Random weights in the released SeedVR2 VAE's (or DiT's) full-size layout, for memory calibration, benches
and the GPU check's jobs.

Reads the tensor names and shapes of `full_keys.txt` (name<TAB>[shape]<TAB>count per line) and writes
a safetensors file: conv/linear weights uniform in ±1/√fan_in (activations stay in range through the
≈250M parameters), norm weights 1, biases 0. Memory and speed do not depend on the values.
    seedvr2_full_weights.py ../shared/reference/seedvr2/full_keys.txt OUT.safetensors [--seed 0]
    seedvr2_full_weights.py ../shared/reference/seedvr2_dit/full_keys_3b.txt DIT.safetensors --dtype float16 --device cuda
(the 3B DiT: 6.8 GB in float16, made on the GPU in seconds where the CPU would take minutes)
"""
import argparse
import math

import torch
from safetensors.torch import save_file


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("keys")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    p.add_argument("--device", default="cpu", help="where the values are drawn (cuda is much faster for the DiT)")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    options = {"dtype": getattr(torch, args.dtype), "device": args.device}
    tensors = {}
    with open(args.keys) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, shape = line.split("\t")[:2]
            shape = [int(d) for d in shape.strip("[] \n").split(",") if d.strip()]
            if name.endswith("weight") and len(shape) > 1:
                bound = 1.0 / math.sqrt(math.prod(shape[1:]))
                tensors[name] = ((torch.rand(shape, **options) * 2 - 1) * bound).cpu()
            elif name.endswith("weight"):
                tensors[name] = torch.ones(shape, dtype=options["dtype"])
            else:
                tensors[name] = torch.zeros(shape, dtype=options["dtype"])
    save_file(tensors, args.out)


if __name__ == "__main__":
    main()
