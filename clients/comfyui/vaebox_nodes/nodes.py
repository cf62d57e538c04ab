"""The ComfyUI nodes: a connection, VAE decode and encode, upscale and restore (SeedVR2, FlashVSR), each handing the
work to a box."""
import os

import numpy as np
import torch

from . import apng, av_clip, frames, jobs, png_frames, remote_vae, tensor_file
from .connection import DEFAULT_URL, Connection
from .model_choices import BOX_DEFAULT_UPSCALER, OWN_NODES, TOKEN_VARIABLE, check_name, listed_models, model_input, remember_box

CATEGORY = "vaebox"
FPS_INPUT = ("FLOAT", {"default": 24.0, "min": 0.01, "max": 1000.0, "step": 0.001, "tooltip": "the frames' rate, sent with them"})
NORMALIZED_INPUT = (
    "BOOLEAN",
    {
        "default": False,
        "tooltip": "the latent is normalized with the VAE's published per-channel mean/std (a diffusers Wan pipeline's "
        "output_type='latent'); ComfyUI's own LATENTs are not: its samplers normalize inside and undo it on the way out",
    },
)
# The box's `dtype` values (src/queue/parameters/table.rs); every op takes it.
PRECISION_INPUT = (["auto", "f32", "bf16", "f16"], {"default": "auto", "tooltip": "the model's precision on the box; auto: the box's dtype (bf16 on a GPU)"})
AUDIO_INPUT = ("AUDIO", {"tooltip": "the frames' sound: kept by the box and returned (needs ffmpeg here); none: no AUDIO back"})
COLOR_FIXES = ["wavelet", "adain", "lab", "hsv", "wavelet_adaptive", "none"]
FLASHVSR_FAMILY = "flashvsr"
# FlashVSR's own decoder (the model folder's TCDecoder, "Tiny"); any other choice names a Wan 2.1 VAE ("Full").
TINY_DECODER = "tiny"
WAN21_FAMILY = "wan21"


def box_dtype(precision):
    """The job's `dtype` field: none for auto, so the box's own applies."""
    return None if precision == "auto" else precision


class VaeboxConnection:
    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"url": ("STRING", {"default": DEFAULT_URL})},
            "optional": {"token": ("STRING", {"default": "", "tooltip": f"the box's access token; empty: ${TOKEN_VARIABLE} or none"})},
        }

    RETURN_TYPES = ("VAEBOX",)
    RETURN_NAMES = ("vaebox",)
    FUNCTION = "connect"
    CATEGORY = CATEGORY
    DESCRIPTION = "A vaebox on the LAN; checks the URL and token by listing its models."

    @classmethod
    def VALIDATE_INPUTS(cls, url, token=""):
        # ComfyUI validates this node before the nodes it feeds: its box's models join their lists and checks.
        try:
            Connection(url if url is not None else DEFAULT_URL)
        except ValueError as e:
            return str(e)
        remember_box(url, token or "")
        return True

    def connect(self, url, token=""):
        connection = Connection(url, token or os.environ.get(TOKEN_VARIABLE, ""))
        connection.models()  # refuses a wrong URL or token here rather than in the first heavy node
        remember_box(connection.url, connection.token)
        return (connection,)


class ModelNode:
    """A node whose `model` is any name a box serves for OP (of FAMILY; None: of no family with a node of its own):
    named in VALIDATE_INPUTS, so ComfyUI asks check_name instead of refusing a name that is not in the listed COMBO."""

    OP = None
    FAMILY = None

    @classmethod
    def VALIDATE_INPUTS(cls, model):
        return check_name(cls.OP, model, cls.FAMILY)


class VaeboxVAEDecode(ModelNode):
    OP = "vae_decode"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"vaebox": ("VAEBOX",), "samples": ("LATENT",), "model": model_input(cls.OP)},
            "optional": {"normalized": NORMALIZED_INPUT, "precision": PRECISION_INPUT},
        }

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "decode"
    CATEGORY = CATEGORY
    DESCRIPTION = "Decodes a video LATENT on the box (a vae_decode job per batch item, float frames back)."

    def decode(self, vaebox, samples, model, normalized=False, precision="auto"):
        decoded = []
        for item in frames.latent_items(samples):
            # The job reads the latent's header: `normalized` makes the box undo the VAE's mean/std first.
            latent = tensor_file.write("latent", item, {"normalized": "true" if normalized else "false"})
            fields = {"op": "vae_decode", "model": model, "output_format": "safetensors", "dtype": box_dtype(precision)}
            data, _ = jobs.run(vaebox, fields, latent, "latent.safetensors")
            decoded.append(tensor_file.read(data, "sample"))
        return (frames.pixels_to_image(np.concatenate(decoded, axis=0)),)


class VaeboxVAEEncode(ModelNode):
    OP = "vae_encode"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {"vaebox": ("VAEBOX",), "pixels": ("IMAGE",), "model": model_input(cls.OP)},
            "optional": {"normalized": NORMALIZED_INPUT, "precision": PRECISION_INPUT},
        }

    RETURN_TYPES = ("LATENT",)
    FUNCTION = "encode"
    CATEGORY = CATEGORY
    DESCRIPTION = "Encodes IMAGE frames (one clip) into a video LATENT on the box, through its remote-VAE /v1/encode."

    def encode(self, vaebox, pixels, model, normalized=False, precision="auto"):
        latent = remote_vae.encode(vaebox, frames.image_to_pixels(pixels), model, normalized, box_dtype(precision))
        return (frames.to_latent([latent]),)


def run_on_frames(connection, fields, images, fps, audio=None):
    """IMAGE frames (and AUDIO) through a video job: (IMAGE, AUDIO or None). Without sound, an 8-bit APNG in (what
    the box would read of any video) and 16-bit PNG frames out, no ffmpeg needed; with it, an FFV1 MKV both ways."""
    rgb8 = frames.image_to_rgb8(images)
    if audio is not None:
        data, _ = jobs.run(connection, dict(fields, output_format="ffv1"), av_clip.encode(rgb8, fps, audio), "frames.mkv")
        return av_clip.decode(data)
    data, _ = jobs.run(connection, dict(fields, output_format="png"), apng.encode(rgb8, fps), "frames.apng")
    return torch.from_numpy(png_frames.decode_zip(data)), None


class VaeboxUpscale(ModelNode):
    OP = "upscale"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "vaebox": ("VAEBOX",),
                "images": ("IMAGE",),
                "model": model_input(cls.OP, BOX_DEFAULT_UPSCALER),
                "scale": ("INT", {"default": 2, "min": 1, "max": 4, "tooltip": "one of the model's scales (GET /v1/models)"}),
                "fps": FPS_INPUT,
            },
            "optional": {"audio": AUDIO_INPUT, "precision": PRECISION_INPUT},
        }

    RETURN_TYPES = ("IMAGE", "AUDIO")
    FUNCTION = "upscale"
    CATEGORY = CATEGORY
    DESCRIPTION = "Upscales IMAGE frames on the box (Real-ESRGAN, Real-CUGAN), as one clip, with its sound."

    def upscale(self, vaebox, images, model, scale, fps, audio=None, precision="auto"):
        fields = {"op": "upscale", "model": model, "scale": scale, "dtype": box_dtype(precision)}
        return run_on_frames(vaebox, fields, images, fps, audio)


class VaeboxRestore(ModelNode):
    OP = "restore"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "vaebox": ("VAEBOX",),
                "images": ("IMAGE",),
                "model": model_input(cls.OP),  # SeedVR2's DiTs: FlashVSR's models have their own node
                "scale": ("INT", {"default": 2, "min": 1, "max": 4, "tooltip": "each side times this; unused when resolution is set"}),
                "resolution": ("INT", {"default": 0, "min": 0, "max": 16384, "tooltip": "the output's short side; 0: use scale"}),
                "seed": ("INT", {"default": 666, "min": 0, "max": 2**63 - 1}),
                "color_fix": (COLOR_FIXES, {"default": "wavelet"}),
                "fps": FPS_INPUT,
            },
            "optional": {"audio": AUDIO_INPUT, "precision": PRECISION_INPUT},
        }

    RETURN_TYPES = ("IMAGE", "AUDIO")
    FUNCTION = "restore"
    CATEGORY = CATEGORY
    DESCRIPTION = "Restores and upscales IMAGE frames on the box with SeedVR2 (one step), as one clip, with its sound."

    def restore(self, vaebox, images, model, scale, resolution, seed, color_fix, fps, audio=None, precision="auto"):
        size = {"resolution": resolution} if resolution > 0 else {"scale": scale}
        fields = dict(op="restore", model=model, seed=seed, color_fix=color_fix, dtype=box_dtype(precision), **size)
        return run_on_frames(vaebox, fields, images, fps, audio)


class VaeboxFlashVSRRestore(ModelNode):
    """FlashVSR takes other fields than SeedVR2 (the box refuses SeedVR2's for it): ×4 only, a decoder, and its own
    seed, fit and colour fix, whose defaults here are the box's for it."""

    OP = "restore"
    FAMILY = FLASHVSR_FAMILY

    @classmethod
    def INPUT_TYPES(cls):
        wan21 = [m["name"] for m in listed_models("vae_decode", WAN21_FAMILY)]
        decoder_tooltip = "tiny: the model's own TCDecoder (FlashVSR-Tiny); a Wan 2.1 VAE of the box decodes instead (FlashVSR-Full)"
        return {
            "required": {
                "vaebox": ("VAEBOX",),
                "images": ("IMAGE",),
                "model": model_input(cls.OP, family=cls.FAMILY),
                "decoder": ([TINY_DECODER] + wan21, {"default": TINY_DECODER, "tooltip": decoder_tooltip}),
                "seed": ("INT", {"default": 0, "min": 0, "max": 2**63 - 1}),
                "fit": (["pad", "crop"], {"default": "pad", "tooltip": "pad: the whole picture; crop: the original's centre crop to multiples of 128"}),
                "color_fix": (["adain", "none"], {"default": "adain"}),
                "fps": FPS_INPUT,
            },
            "optional": {"audio": AUDIO_INPUT, "precision": PRECISION_INPUT},
        }

    RETURN_TYPES = ("IMAGE", "AUDIO")
    FUNCTION = "restore"
    CATEGORY = CATEGORY
    DESCRIPTION = "Restores and upscales IMAGE frames ×4 on the box with FlashVSR (one step, streaming), as one clip, with its sound."

    @classmethod
    def VALIDATE_INPUTS(cls, model, decoder):
        # The decoder, as the model, may be any Wan 2.1 VAE a box serves, listed or not.
        checked = check_name(cls.OP, model, cls.FAMILY)
        if checked is True and decoder != TINY_DECODER:
            return check_name("vae_decode", decoder, WAN21_FAMILY)
        return checked

    def restore(self, vaebox, images, model, decoder, seed, fit, color_fix, fps, audio=None, precision="auto"):
        fields = dict(op="restore", model=model, seed=seed, fit=fit, color_fix=color_fix, dtype=box_dtype(precision))
        if decoder != TINY_DECODER:
            fields["vae"] = decoder
        return run_on_frames(vaebox, fields, images, fps, audio)


NODE_CLASS_MAPPINGS = {
    "VaeboxConnection": VaeboxConnection,
    "VaeboxVAEDecode": VaeboxVAEDecode,
    "VaeboxVAEEncode": VaeboxVAEEncode,
    "VaeboxUpscale": VaeboxUpscale,
    "VaeboxRestore": VaeboxRestore,
    "VaeboxFlashVSRRestore": VaeboxFlashVSRRestore,
}

NODE_DISPLAY_NAME_MAPPINGS = {
    "VaeboxConnection": "vaebox connection",
    "VaeboxVAEDecode": "VAE Decode (vaebox)",
    "VaeboxVAEEncode": "VAE Encode (vaebox)",
    "VaeboxUpscale": "Upscale (vaebox)",
    "VaeboxRestore": "Restore (vaebox)",
    "VaeboxFlashVSRRestore": OWN_NODES[FLASHVSR_FAMILY],
}
