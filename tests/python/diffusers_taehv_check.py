"""Calls a running vaebox with diffusers' own remote-VAE clients on its `taew2_1` model and compares the answers
with the original taehv.py's (../shared/reference/taehv), converted to the Wan 2.1 VAE's raw latent space with
the Wan reference's own published statistics. Prints one JSON object; the Rust test asserts on it.

usage: diffusers_taehv_check.py BASE_URL TAEHV_CASE_FILE WAN21_CONFIG_JSON
"""
import json
import sys

import torch
from safetensors.torch import load_file
from diffusers.utils.remote_utils import remote_decode, remote_encode

base, case_file, config_file = sys.argv[1:4]
case = load_file(case_file)
config = json.load(open(config_file))
mean = torch.tensor(config["latents_mean"]).view(1, -1, 1, 1, 1)
std = torch.tensor(config["latents_std"]).view(1, -1, 1, 1, 1)
out = {}

# A Wan 2.1 raw latent (NCTHW), as a diffusers Wan pipeline has it before its VAE decode (contiguous: the client
# sends the tensor's memory as it lies, and a permuted view's lies in the other order).
latent = (case["dec_a.latent"].permute(0, 2, 1, 3, 4) * std + mean).contiguous()
pixels = remote_decode(endpoint=f"{base}/v1/decode?model=taew2_1&dtype=f32", tensor=latent,
                       output_type="pt", return_type="pt", do_scaling=False)
expected = case["dec_a.out_parallel"].permute(0, 2, 1, 3, 4) * 2 - 1
out["decode_shape"] = list(pixels.shape)
out["decode_max_abs"] = (pixels.float() - expected).abs().max().item()

# Two pictures ([B, 3, H, W] in [-1, 1]) encode to one latent frame each, the Wan 2.1 VAE's raw latent.
images = (case["enc_b.video"][:, 0] * 2 - 1).contiguous()
encoded = remote_encode(endpoint=f"{base}/v1/encode?model=taew2_1&dtype=f32", image=images)
expected = case["enc_b.latent_parallel"].permute(0, 2, 1, 3, 4) * std + mean
out["encode_shape"] = list(encoded.shape)
out["encode_max_abs"] = (encoded.float() - expected).abs().max().item()
print(json.dumps(out))
