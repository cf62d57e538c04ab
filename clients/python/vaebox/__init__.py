"""A client for a vaebox, the LAN video VAE / restoration / upscaling / frame-interpolation box.

    import vaebox
    box = vaebox.Client("http://box:8080")
    job = box.submit("clip.mp4", "upscale", model="realesrgan-animevideov3", scale=2)
    job = box.follow(job["id"], lambda j: print(j["status"], (j.get("progress") or {}).get("fraction")))
    box.download(job["id"], ".")
"""
from ._generated import OPS, PARAMETERS, Estimate, Job, ModelInfo, Parameter, QueuePlace
from .client import Client, Download
from .errors import BoxError, MalformedAnswer, ParameterError

__version__ = "0.1.0"
__all__ = [
    "Client", "Download", "BoxError", "MalformedAnswer", "ParameterError", "Job", "Estimate", "QueuePlace", "ModelInfo", "Parameter", "OPS", "PARAMETERS",
]
