"""Calls a running vaebox with diffusers' own remote-VAE client functions and compares the answers with
reference tensors produced by the original model code. Prints one JSON object; the Rust test asserts on it.

usage: diffusers_remote_client.py BASE_URL MODEL CASE_FILE SAMPLE_KEY LATENT_KEY DECODED_KEY
"""
import json
import sys

import torch
from safetensors.torch import load_file
from diffusers.utils.remote_utils import remote_decode, remote_encode

base, model, case_file, sample_key, latent_key, decoded_key = sys.argv[1:7]
case = load_file(case_file)
sample, latent, decoded = case[sample_key], case[latent_key], case[decoded_key].clamp(-1, 1)
out = {}

encoded = remote_encode(endpoint=f"{base}/v1/encode?model={model}&dtype=f32", image=sample)
out["encode_shape"] = list(encoded.shape)
out["encode_max_abs"] = (encoded.float() - latent).abs().max().item()

pixels = remote_decode(endpoint=f"{base}/v1/decode?model={model}&dtype=f32", tensor=latent,
                       output_type="pt", return_type="pt", do_scaling=False)
out["decode_shape"] = list(pixels.shape)
out["decode_dtype"] = str(pixels.dtype)
out["decode_max_abs"] = (pixels.float() - decoded).abs().max().item()

# A bf16 latent is accepted and decodes close to the reference.
pixels = remote_decode(endpoint=f"{base}/v1/decode?model={model}&dtype=f32", tensor=latent.to(torch.bfloat16),
                       output_type="pt", return_type="pt", do_scaling=False)
out["decode_bf16_input_max_abs"] = (pixels.float() - decoded).abs().max().item()

# scaling_factor follows diffusers' convention: the server decodes latent / scaling_factor.
pixels = remote_decode(endpoint=f"{base}/v1/decode?model={model}&dtype=f32", tensor=latent * 0.5,
                       scaling_factor=0.5, output_type="pt", return_type="pt")
out["decode_scaled_max_abs"] = (pixels.float() - decoded).abs().max().item()

video = remote_decode(endpoint=f"{base}/v1/decode?model={model}", tensor=latent, output_type="mp4", return_type="mp4",
                      do_scaling=False)
out["mp4_bytes"] = len(video)
out["mp4_has_ftyp"] = video[4:8] == b"ftyp"

try:
    remote_decode(endpoint=f"{base}/v1/decode?model={model}", tensor=latent[:, :8], output_type="pt",
                  return_type="pt", do_scaling=False)
    out["wrong_channels_error"] = None
except RuntimeError as e:
    out["wrong_channels_error"] = e.args[0]

print(json.dumps(out))
