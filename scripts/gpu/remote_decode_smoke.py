#!/usr/bin/env python3
"""Smoke test of vaebox's remote-VAE endpoint with diffusers' own client.

Decodes one latent through `diffusers.utils.remote_utils.remote_decode` against
`{url}/v1/decode?model={model}`, times the call (upload, queue, decode, download), checks that the
result is a [1, 3, T, H, W] tensor of finite values, then reads the job that ran (its id comes in the
`x-vaebox-job` response header; GET /v1/jobs/{id}) for the server's own `timings`, including
`peak_device_bytes`.

    remote_decode_smoke.py --url http://127.0.0.1:8080 --model wan2.1 \
        --latent in.safetensors --out smoke.json

--latent is a safetensors file with a float32 tensor `latent` [1, C, t, h, w] (e.g. from
scripts/bench/diffusers_vae.py --make-input). --out gets one JSON object:
    {"ok": true, "seconds": S, "shape": [1, 3, T, H, W], "dtype": "float32", "finite": true,
     "min": .., "max": .., "latent_shape": [..], "endpoint": .., "diffusers": .., "torch": ..,
     "job": ID, "job_status": .., "timings": {...}, "peak_device_bytes": N or null, "device": ..}
On failure it prints the reason to stderr, writes {"ok": false, "error": ..} (with whatever was
measured so far) to --out, and exits 1.
"""
import argparse
import inspect
import json
import sys
import time
import urllib.parse

import requests
import torch
from safetensors.torch import load_file

JOB_HEADER = "x-vaebox-job"


class SmokeError(Exception):
    pass


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--model", required=True, help="the VAE's name on the server (see GET /v1/models)")
    p.add_argument("--latent", required=True, help="safetensors with a float32 tensor `latent` [1, C, t, h, w]")
    p.add_argument("--out", required=True, help="where the JSON result goes")
    p.add_argument("--token", help="access token, sent as `Authorization: Bearer` (for a box with tokens)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for the job record requests")
    return p.parse_args()


class CapturePost:
    """Wraps `requests.post` while remote_decode runs: keeps the response (for its x-vaebox-job header)
    and adds the Authorization header when a token is given. remote_decode calls `requests.post`
    through the module, so replacing the module attribute reaches it."""

    def __init__(self, token):
        self.token = token
        self.responses = []
        self._original = None

    def __enter__(self):
        self._original = requests.post
        original = self._original

        def post(url, *args, **kwargs):
            if self.token:
                headers = dict(kwargs.get("headers") or {})
                headers["Authorization"] = f"Bearer {self.token}"
                kwargs["headers"] = headers
            response = original(url, *args, **kwargs)
            self.responses.append(response)
            return response

        requests.post = post
        return self

    def __exit__(self, *exc):
        requests.post = self._original
        return False


def decode_kwargs(remote_decode) -> dict:
    """The remote_decode arguments for "raw float tensor back, no scaling, no processor", spelled for
    whichever diffusers is installed (the signature has changed between releases)."""
    wanted = {
        "output_type": "pt",
        "return_type": "pt",
        # Deprecated in newer releases but still the documented way to say "no scaling"; without a
        # scaling_factor/shift_factor nothing is scaled either way.
        "do_scaling": False,
        "partial_postprocess": False,
        "input_tensor_type": "binary",
        "output_tensor_type": "binary",
    }
    try:
        params = inspect.signature(remote_decode).parameters
    except (TypeError, ValueError):
        return {"output_type": "pt", "return_type": "pt", "do_scaling": False}
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return {"output_type": "pt", "return_type": "pt", "do_scaling": False}
    missing = [name for name in ("output_type", "return_type") if name not in params]
    if missing:
        raise SmokeError(f"this diffusers' remote_decode has no {missing} parameter(s); signature: {inspect.signature(remote_decode)}")
    return {name: value for name, value in wanted.items() if name in params}


def auth_headers(token) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


def get_json(url: str, args) -> dict:
    try:
        response = requests.get(url, headers=auth_headers(args.token), timeout=args.timeout)
    except requests.RequestException as error:
        raise SmokeError(f"GET {url}: {error}") from error
    if not response.ok:
        raise SmokeError(f"GET {url}: HTTP {response.status_code}: {response.text[:500]}")
    try:
        return response.json()
    except ValueError as error:
        raise SmokeError(f"GET {url}: not JSON: {response.text[:200]}") from error


def find_job_id(capture: CapturePost) -> str:
    for response in reversed(capture.responses):
        job = response.headers.get(JOB_HEADER)
        if job:
            return job
    raise SmokeError(f"no {JOB_HEADER} header in the decode response")


def job_record(base: str, job_id: str, args) -> dict:
    url = f"{base}/v1/jobs/{urllib.parse.quote(job_id)}"
    # The synchronous call answers after the job finished, so its timings are there; a few retries in
    # case the record is written a moment later.
    for attempt in range(10):
        job = get_json(url, args)
        if job.get("timings") is not None and job.get("status") in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.2 * (attempt + 1))
    return job


def smoke(args, result: dict) -> None:
    base = args.url.rstrip("/")
    try:
        latent = load_file(args.latent)["latent"]
    except KeyError as error:
        raise SmokeError(f"{args.latent} has no tensor `latent`") from error
    result["latent_shape"] = list(latent.shape)
    if latent.ndim != 5 or latent.shape[0] != 1:
        raise SmokeError(f"latent shape {list(latent.shape)}: expected [1, C, t, h, w]")
    if latent.dtype != torch.float32:
        log(f"latent is {latent.dtype}; sending it as float32")
        latent = latent.float()
    latent = latent.contiguous()

    try:
        import diffusers
        from diffusers.utils.remote_utils import remote_decode
    except ImportError as error:
        raise SmokeError(f"diffusers with remote_utils.remote_decode is needed: {error}") from error
    result["diffusers"] = diffusers.__version__
    kwargs = decode_kwargs(remote_decode)
    endpoint = f"{base}/v1/decode?model={urllib.parse.quote(args.model, safe='')}"
    result["endpoint"] = endpoint
    result["remote_decode_kwargs"] = kwargs

    log(f"remote_decode {list(latent.shape)} -> {endpoint}")
    with CapturePost(args.token) as capture:
        start = time.perf_counter()
        try:
            output = remote_decode(endpoint=endpoint, tensor=latent, **kwargs)
        except Exception as error:  # remote_decode raises RuntimeError(response.json()) on an HTTP error
            raise SmokeError(f"remote_decode failed: {type(error).__name__}: {error}") from error
        result["seconds"] = time.perf_counter() - start
    log(f"remote_decode took {result['seconds']:.3f} s")

    if not isinstance(output, torch.Tensor):
        raise SmokeError(f"remote_decode returned {type(output).__name__}, not a tensor")
    result["shape"] = list(output.shape)
    result["dtype"] = str(output.dtype).removeprefix("torch.")
    values = output.float()
    result["finite"] = bool(torch.isfinite(values).all())
    if values.numel():
        result["min"] = float(values.min())
        result["max"] = float(values.max())
        result["mean"] = float(values.mean())

    job_id = find_job_id(capture)
    result["job"] = job_id
    job = job_record(base, job_id, args)
    result["job_status"] = job.get("status")
    result["timings"] = job.get("timings")
    timings = job.get("timings") or {}
    result["peak_device_bytes"] = timings.get("peak_device_bytes")
    result["device"] = timings.get("device")
    result["plan"] = job.get("plan")

    problems = []
    shape = result["shape"]
    if len(shape) != 5 or shape[0] != 1 or shape[1] != 3:
        problems.append(f"output shape {shape}: expected [1, 3, T, H, W]")
    if not result["finite"]:
        problems.append("output has non-finite values")
    if result["job_status"] != "succeeded":
        problems.append(f"job {job_id} is {result['job_status']}")
    if problems:
        raise SmokeError("; ".join(problems))


def main():
    args = parse_args()
    result = {"ok": False, "url": args.url, "model": args.model, "torch": torch.__version__}
    code = 0
    try:
        smoke(args, result)
        result["ok"] = True
    except SmokeError as error:
        result["error"] = str(error)
        log(f"remote_decode smoke test FAILED: {error}")
        code = 1
    # The verdict and the numbers first, the long parts (plan) last: a report may show only the start.
    first = ("ok", "error", "seconds", "shape", "dtype", "finite", "peak_device_bytes", "device", "job", "job_status", "timings")
    result = {**{k: result[k] for k in first if k in result}, **{k: v for k, v in result.items() if k not in first and k != "plan"},
              **({"plan": result["plan"]} if "plan" in result else {})}
    with open(args.out, "w") as out:
        json.dump(result, out, indent=2)
        out.write("\n")
    print(json.dumps(result), flush=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
