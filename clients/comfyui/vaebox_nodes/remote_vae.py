"""`POST /v1/encode`, the box's synchronous remote-VAE call: float pixels in, float latents out, with no
8-bit video in between (a job's input is a video, which the box reads at 8 bits per sample).

The call is answered when its job has finished, so it runs on a worker thread while this one watches
ComfyUI's Cancel flag; cancelling hangs up, and the box cancels the job of a caller that hung up."""
import http.client
import json
import threading
import urllib.parse

import numpy as np

from . import comfy_hooks
from .connection import MAX_RESULT_BYTES, error_from_body, hang_up, read_bounded
from .errors import VaeboxError

WATCH_S = 0.2
# Once the connection is closed the worker thread ends at once; this only bounds a stuck close.
JOIN_S = 5.0
# The answer only comes when the job is done: the socket waits that long at most, per read.
CALL_TIMEOUT_S = 3600.0


def encode(connection, pixels, model, normalized, precision=None):
    """`[1, 3, T, H, W]` float32 in -1..1 → the latent `[1, C, t, h, w]` float32, the VAE run at `precision`
    (f32, bf16, f16; None: the box's own)."""
    # The protocol's `dtype` describes the tensor; a precision named before it is the one the VAE runs at.
    dtypes = ([precision] if precision else []) + ["float32"]
    query = {"model": model, "shape": list(pixels.shape), "dtype": dtypes}
    if normalized:
        query["normalize"] = "true"
    status, headers, body = call(connection, "/v1/encode", query, np.ascontiguousarray(pixels, "<f4").tobytes())
    shape = json.loads(headers.get("shape", "null") or "null")
    if headers.get("dtype") != "float32" or not isinstance(shape, list):
        raise VaeboxError("bad-answer", f"expected a float32 tensor, got dtype {headers.get('dtype')!r} shape {shape!r}", status, connection.url)
    return np.frombuffer(body, "<f4").reshape(shape).copy()


def call(connection, path, query, body):
    """POST `body`; (status, headers, body) of a 2xx answer. Cancel hangs up and raises."""
    url = urllib.parse.urlsplit(connection.address(path, query))
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    link = kind(url.hostname, url.port, timeout=CALL_TIMEOUT_S)
    target = url.path + ("?" + url.query if url.query else "")
    headers = connection.headers({"Content-Type": "application/octet-stream", "Content-Length": str(len(body))})
    outcome = {}

    def exchange():
        try:
            link.request("POST", target, body=body, headers=headers)
            response = link.getresponse()
            limit = MAX_RESULT_BYTES if 200 <= response.status < 300 else 1 << 20
            outcome["answer"] = (response.status, response.headers, read_bounded(response, limit))
        except BaseException as e:  # handed to the caller's thread
            outcome["error"] = e

    worker = threading.Thread(target=exchange, name="vaebox-remote-call", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(WATCH_S)
            if worker.is_alive() and comfy_hooks.interrupted():
                hang_up(link)
                worker.join(JOIN_S)
                comfy_hooks.raise_interrupted()
    finally:
        link.close()
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, VaeboxError):
            raise error
        raise VaeboxError("unreachable", f"cannot reach {connection.url}: {error}", None, connection.url) from None
    status, answer_headers, data = outcome["answer"]
    if not 200 <= status < 300:
        raise error_from_body(status, data, connection.url)
    return status, answer_headers, data
