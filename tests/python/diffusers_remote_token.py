"""diffusers' own remote_decode against a vaebox that has access tokens: the secret rides in the endpoint URL
(`http://user:secret@host/...`, which `requests` sends as HTTP Basic), the only place this client takes it.
Prints one JSON object; the Rust test asserts on it.

usage: diffusers_remote_token.py BASE_URL_WITH_CREDENTIALS BASE_URL CASE_FILE LATENT_KEY
"""
import json
import sys

from safetensors.torch import load_file
from diffusers.utils.remote_utils import remote_decode

with_token, without_token, case_file, latent_key = sys.argv[1:5]
latent = load_file(case_file)[latent_key]
query = "/v1/decode?model=wan21-tiny&dtype=f32"
out = {}
pixels = remote_decode(endpoint=with_token + query, tensor=latent, output_type="pt", return_type="pt", do_scaling=False)
out["shape"] = list(pixels.shape)
try:
    remote_decode(endpoint=without_token + query, tensor=latent, output_type="pt", return_type="pt", do_scaling=False)
    out["without_token"] = "accepted"
except RuntimeError as refused:
    out["without_token"] = refused.args[0]
print(json.dumps(out))
