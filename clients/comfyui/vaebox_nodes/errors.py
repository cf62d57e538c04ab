"""The box's refusals as exceptions people can act on: its stable code, its message, and what to do."""

# The codes a ComfyUI user meets most, and the fix that is theirs to make.
HINTS = {
    "unauthorized": "the box has access tokens: put yours in the 'token' input of the vaebox connection node",
    "unknown-model": "check the model name; GET {url}/v1/models lists the box's models",
    "missing-model": "name the model in the node; GET {url}/v1/models lists the box's models",
    "model-weights-missing": "the box knows the model but its files are not in its models folder",
    "unsupported-op": "this model cannot do this operation; GET {url}/v1/models lists each model's ops",
    "invalid-scale": "pick one of the model's scales (GET {url}/v1/models lists them)",
    "latent-channel-mismatch": "the latent was made for another VAE: pick the VAE that made it",
    "queue-full": "the box's queue is full; try again when its jobs have finished",
    "output-too-large": "the result would exceed the box's max_width, max_height or max_frames",
    "normalize-unsupported": "this VAE has no published latent statistics, so ComfyUI's normalized latents do not apply",
    "latent-normalize-unsupported": "this VAE has no published latent statistics, so ComfyUI's normalized latents do not apply",
}


class VaeboxError(RuntimeError):
    """A refusal or failure reported by the box (or the box not being reachable: code `unreachable`)."""

    def __init__(self, code, message, status=None, url="", job=None):
        self.code = code
        self.message = message
        self.status = status
        self.job = job
        hint = HINTS.get(code, "").format(url=url)
        where = f"HTTP {status}" if status else "no answer"
        text = f"vaebox {code} ({where}): {message}"
        if job:
            text += f" [job {job}]"
        if hint:
            text += f". Hint: {hint}"
        super().__init__(text)


class VaeboxInterrupted(RuntimeError):
    """The ComfyUI prompt was cancelled; the box's job was cancelled with it."""
