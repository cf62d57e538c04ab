"""The box's lossless `png` output (a zip of 16-bit RGB PNG frames) → float frames, read with zlib and numpy."""
import io
import struct
import zipfile
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
COLOR_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # grey, RGB, grey + alpha, RGBA
# A frame's decompressed bytes are bounded by its header; this bounds the header, and the next a frame's file.
MAX_SIDE = 1 << 15
MAX_FRAME_FILE_BYTES = 1 << 30


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def unfilter(raw, height, stride, bpp):
    """PNG's per-row filters undone: none, sub and up at numpy speed; average and Paeth byte by byte."""
    rows = np.frombuffer(raw, np.uint8).reshape(height, stride + 1)
    out = np.zeros((height, stride), np.uint8)
    previous = np.zeros(stride, np.uint8)
    for y in range(height):
        kind, line = rows[y, 0], rows[y, 1:]
        if kind == 0:
            current = line.copy()
        elif kind == 1:
            lanes = np.pad(line, (0, -stride % bpp)).reshape(-1, bpp)
            current = (np.cumsum(lanes, axis=0, dtype=np.uint64) % 256).astype(np.uint8).reshape(-1)[:stride]
        elif kind == 2:
            current = line + previous
        elif kind in (3, 4):
            current = bytearray(line.tobytes())
            up = previous.tobytes()
            for x in range(stride):
                left = current[x - bpp] if x >= bpp else 0
                corner = up[x - bpp] if x >= bpp else 0
                predicted = (left + up[x]) // 2 if kind == 3 else paeth(left, up[x], corner)
                current[x] = (current[x] + predicted) & 0xFF
            current = np.frombuffer(bytes(current), np.uint8)
        else:
            raise ValueError(f"PNG row filter {kind} does not exist")
        out[y] = current
        previous = out[y]
    return out


def decode_png(data):
    """A PNG (8 or 16 bits, grey or RGB, alpha dropped, not interlaced) → float32 `[H, W, 3]` in 0..1."""
    if data[:8] != SIGNATURE:
        raise ValueError("not a PNG file")
    position, header, compressed = 8, None, []
    while position + 8 <= len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            compressed.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("PNG without IHDR")
    width, height, depth, color, _, _, interlace = header
    if depth not in (8, 16) or color not in COLOR_CHANNELS or interlace or not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise ValueError(f"unsupported PNG: {width}x{height}, depth {depth}, colour type {color}, interlace {interlace}")
    channels = COLOR_CHANNELS[color]
    bpp = channels * depth // 8
    stride = width * bpp
    expected = height * (stride + 1)
    inflater = zlib.decompressobj()
    raw = inflater.decompress(b"".join(compressed), expected)
    if len(raw) != expected:
        raise ValueError(f"PNG data has {len(raw)} bytes, {expected} expected")
    pixels = unfilter(raw, height, stride, bpp)
    values = pixels.view(">u2") if depth == 16 else pixels
    values = values.reshape(height, width, channels).astype(np.float32) / float((1 << depth) - 1)
    rgb = values[..., :3] if channels >= 3 else np.repeat(values[..., :1], 3, axis=2)
    return np.ascontiguousarray(rgb)


def decode_zip(data):
    """The box's PNG zip (`frame_000000.png` onward) → float32 frames `[N, H, W, 3]` in 0..1, in name order."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        entries = sorted((i for i in archive.infolist() if i.filename.lower().endswith(".png")), key=lambda i: i.filename)
        if not entries:
            raise ValueError("the result zip holds no PNG frames")
        too_big = [i.filename for i in entries if i.file_size > MAX_FRAME_FILE_BYTES]
        if too_big:
            raise ValueError(f"frames over {MAX_FRAME_FILE_BYTES} bytes in the result zip: {too_big[:3]}")
        names = [i.filename for i in entries]
        return np.stack([decode_png(archive.read(name)) for name in names])
