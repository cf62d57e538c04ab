"""Frames with sound, for a node given ComfyUI's AUDIO (`{"waveform": [B, C, samples], "sample_rate": int}`):
a Matroska clip of lossless FFV1 frames and float PCM made with ffmpeg, which the box copies the sound of into
its FFV1 result, and that result read back with ffmpeg. An APNG and a zip of PNG frames cannot carry sound,
and only this path needs ffmpeg on the ComfyUI side."""
import json
import os
import shutil
import subprocess
import tempfile
from fractions import Fraction

import numpy as np
import torch

from .errors import VaeboxError

FFMPEG_VARIABLE = "COMFY_VAEBOX_FFMPEG"
# ffmpeg turns a clip of a few hundred frames around in seconds; this only stops one that hangs.
FFMPEG_TIMEOUT_S = 600.0


def tool(name):
    """ffmpeg or ffprobe: $COMFY_VAEBOX_FFMPEG's folder, else PATH."""
    folder = os.environ.get(FFMPEG_VARIABLE)
    path = os.path.join(folder, name) if folder else shutil.which(name)
    if not path or not os.path.exists(path):
        raise VaeboxError("ffmpeg-missing", f"sending AUDIO to the box needs {name} on the ComfyUI machine (PATH or ${FFMPEG_VARIABLE})")
    return path


def run(args, stdin=None):
    done = subprocess.run(args, input=stdin, capture_output=True, timeout=FFMPEG_TIMEOUT_S)
    if done.returncode != 0:
        raise VaeboxError("ffmpeg-failed", done.stderr.decode("utf-8", "replace").strip()[-500:] or f"{args[0]} failed")
    return done.stdout


def audio_samples(audio):
    """AUDIO → (float32 `[samples, C]`, sample rate); one clip only, as the frames are one."""
    waveform, rate = audio["waveform"], int(audio["sample_rate"])
    waveform = waveform.detach().cpu().float().numpy() if isinstance(waveform, torch.Tensor) else np.asarray(waveform, np.float32)
    if waveform.ndim == 2:
        waveform = waveform[None]
    if waveform.ndim != 3 or waveform.shape[0] != 1:
        raise ValueError(f"expected one clip's AUDIO waveform [1, C, samples], got {list(waveform.shape)}")
    return np.ascontiguousarray(waveform[0].T, dtype="<f4"), rate


def encode(frames, fps, audio):
    """uint8 frames `[N, H, W, 3]` at `fps` and AUDIO → the bytes of an MKV (FFV1 RGB, 32-bit float PCM)."""
    count, height, width, _ = frames.shape
    samples, rate = audio_samples(audio)
    rate_text = str(Fraction(fps).limit_denominator(1001000))
    with tempfile.TemporaryDirectory(prefix="vaebox-") as scratch:
        sound, clip = os.path.join(scratch, "audio.f32"), os.path.join(scratch, "clip.mkv")
        samples.tofile(sound)
        run([tool("ffmpeg"), "-nostdin", "-v", "error", "-y",
             "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-framerate", rate_text, "-i", "-",
             "-f", "f32le", "-ar", str(rate), "-ac", str(samples.shape[1]), "-i", sound,
             "-map", "0:v", "-map", "1:a", "-c:v", "ffv1", "-pix_fmt", "bgr0", "-c:a", "pcm_f32le", clip],
            stdin=np.ascontiguousarray(frames, np.uint8).tobytes())
        with open(clip, "rb") as f:
            return f.read()


def decode(data):
    """An FFV1 result with sound → (float32 IMAGE `[N, H, W, 3]` at 16 bits, AUDIO or None when it has none)."""
    with tempfile.TemporaryDirectory(prefix="vaebox-") as scratch:
        clip = os.path.join(scratch, "result.mkv")
        with open(clip, "wb") as f:
            f.write(data)
        streams = json.loads(run([tool("ffprobe"), "-v", "error", "-show_entries", "stream=codec_type,width,height,sample_rate,channels", "-of", "json", clip]))["streams"]
        video = next(s for s in streams if s["codec_type"] == "video")
        width, height = int(video["width"]), int(video["height"])
        pixels = run([tool("ffmpeg"), "-nostdin", "-v", "error", "-i", clip, "-map", "0:v:0", "-f", "rawvideo", "-pix_fmt", "rgb48le", "-"])
        images = np.frombuffer(pixels, "<u2").reshape(-1, height, width, 3).astype(np.float32) / 65535.0
        sound = next((s for s in streams if s["codec_type"] == "audio"), None)
        if sound is None:
            return torch.from_numpy(images), None
        channels, rate = int(sound["channels"]), int(sound["sample_rate"])
        raw = run([tool("ffmpeg"), "-nostdin", "-v", "error", "-i", clip, "-map", "0:a:0", "-f", "f32le", "-c:a", "pcm_f32le", "-"])
        waveform = np.frombuffer(raw, "<f4").reshape(-1, channels).T[None].copy()
        return torch.from_numpy(images), {"waveform": torch.from_numpy(waveform), "sample_rate": rate}
