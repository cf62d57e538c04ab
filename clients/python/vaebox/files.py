"""Where results go on this machine: never over an existing file, and which files of a folder to send."""
from __future__ import annotations

import os
from pathlib import Path
from typing import List

# What a folder submission sends: video containers ffmpeg reads (the box probes each; anything else it
# refuses with not-a-video), and the latent files vae_decode takes.
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".ts", ".mts", ".m2ts", ".wmv", ".flv", ".y4m")
LATENT_SUFFIXES = (".safetensors", ".latent")
# Kept whole when a name gets a number: `clip.latent-1.safetensors` would hide what the file is.
DOUBLE_SUFFIXES = (".latent.safetensors",)


def files_to_submit(folder: Path, op: str = None) -> List[Path]:
    """The folder's video files (for vae_decode: its latents), by name; not its subfolders."""
    suffixes = LATENT_SUFFIXES if op == "vae_decode" else VIDEO_SUFFIXES
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes and not p.name.startswith("."))


def safe_file_name(name: str, fallback: str) -> str:
    """The box's name for a result, as a plain file name here (no folders, no `..`)."""
    name = os.path.basename(name.replace("\\", "/")).strip()
    return name if name and name not in (".", "..") else fallback


def free_path(folder: Path, name: str) -> Path:
    """`folder/name`, or `folder/stem-1.ext`, `-2`, ... when that exists."""
    path = folder / name
    if not path.exists():
        return path
    suffix = next((s for s in DOUBLE_SUFFIXES if name.endswith(s)), Path(name).suffix)
    stem = name[: len(name) - len(suffix)] if suffix else name
    number = 1
    while True:
        path = folder / f"{stem}-{number}{suffix}"
        if not path.exists():
            return path
        number += 1
