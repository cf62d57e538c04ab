"""The model input of a node: a list of the box's models for an op when the box answers while ComfyUI builds
its menus, else a text field. The box named by COMFY_VAEBOX_URL (default http://127.0.0.1:8080) is asked, with
COMFY_VAEBOX_TOKEN; a connection node pointing at another box takes the name typed or picked all the same."""
import os
import time

from .connection import DEFAULT_URL, Connection
from .errors import VaeboxError

URL_VARIABLE = "COMFY_VAEBOX_URL"
TOKEN_VARIABLE = "COMFY_VAEBOX_TOKEN"
# ComfyUI asks for every node's inputs at once; a box that is away must not stall its start.
LIST_TIMEOUT_S = 1.5
CACHE_S = 30.0

_cache = {}


def box_models():
    """The box's models, or None when it cannot be asked; kept CACHE_S seconds per URL."""
    url = os.environ.get(URL_VARIABLE) or DEFAULT_URL
    cached = _cache.get(url)
    if cached is not None and time.monotonic() - cached[0] < CACHE_S:
        return cached[1]
    try:
        models = Connection(url, os.environ.get(TOKEN_VARIABLE, "")).models(timeout=LIST_TIMEOUT_S)
    except (VaeboxError, ValueError, KeyError):
        models = None
    _cache[url] = (time.monotonic(), models)
    return models


def model_input(op, default=""):
    """A ComfyUI input spec for a model that can do `op`."""
    names = [m["name"] for m in box_models() or [] if op in m.get("ops", []) and m.get("present", True)]
    if names:
        return (names, {"default": default if default in names else names[0]})
    return ("STRING", {"default": default, "tooltip": "a model name from the box's GET /v1/models"})
