"""Frames → an animated PNG, the lossless video this package sends: ffmpeg (the box's decoder) reads APNG
with its frame rate and frame count, and writing one needs only zlib, with no ffmpeg on the ComfyUI side."""
import struct
import zlib
from fractions import Fraction

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
# APNG stores each frame's duration as a 16-bit numerator and denominator.
MAX_DELAY_TERM = 65535


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def frame_delay(fps):
    """The frame duration 1/fps as APNG's (numerator, denominator), both within 16 bits."""
    if not fps > 0:
        raise ValueError(f"fps must be above 0, got {fps}")
    delay = Fraction(1) / Fraction(fps).limit_denominator(MAX_DELAY_TERM)
    delay = delay.limit_denominator(MAX_DELAY_TERM)
    if delay.numerator > MAX_DELAY_TERM or delay.numerator == 0:
        raise ValueError(f"fps {fps} cannot be written as an APNG frame duration")
    return delay.numerator, delay.denominator


def encode(frames, fps, level=6):
    """uint8 frames `[N, H, W, 3]` at `fps` → the bytes of an APNG that plays them once."""
    frames = np.ascontiguousarray(frames, dtype=np.uint8)
    count, height, width, _ = frames.shape
    numerator, denominator = frame_delay(fps)
    out = [SIGNATURE, chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)), chunk(b"acTL", struct.pack(">II", count, 0))]
    sequence = 0
    for index, frame in enumerate(frames):
        control = struct.pack(">IIIIIHHBB", sequence, width, height, 0, 0, numerator, denominator, 0, 0)
        out.append(chunk(b"fcTL", control))
        sequence += 1
        # Filter type 0 (none) at the start of every row.
        rows = np.concatenate([np.zeros((height, 1), np.uint8), frame.reshape(height, width * 3)], axis=1)
        data = zlib.compress(rows.tobytes(), level)
        if index == 0:
            out.append(chunk(b"IDAT", data))
        else:
            out.append(chunk(b"fdAT", struct.pack(">I", sequence) + data))
            sequence += 1
    out.append(chunk(b"IEND", b""))
    return b"".join(out)
