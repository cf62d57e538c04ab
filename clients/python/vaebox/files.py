"""Where results go on this machine: never over an existing file, and which files of a folder to send."""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Tuple

# What a folder submission sends: video containers ffmpeg reads (the box probes each; anything else it
# refuses with not-a-video), and the latent files vae_decode takes.
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".ts", ".mts", ".m2ts", ".wmv", ".flv", ".y4m")
LATENT_SUFFIXES = (".safetensors", ".latent")
# Still pictures and zips of PNG frames, which upscale and restore take as well.
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".zip")
PICTURE_OPS = (None, "upscale", "restore")
# Kept whole when a name gets a number: `clip.latent-1.safetensors` would hide what the file is.
DOUBLE_SUFFIXES = (".latent.safetensors",)


def sorted_files(folder: Path, op: str = None) -> Tuple[List[Path], List[Tuple[Path, str]]]:
    """The folder's files to send, by name (for vae_decode its latents; videos, and for upscale and restore
    pictures and zips of frames too), and the entries left out, each with why (subfolders are not sent)."""
    if op == "vae_decode":
        suffixes, what = LATENT_SUFFIXES, "not a latent (" + ", ".join(LATENT_SUFFIXES) + ")"
    elif op in PICTURE_OPS:
        suffixes, what = VIDEO_SUFFIXES + PICTURE_SUFFIXES, "not a video, picture or zip of frames"
    else:
        suffixes, what = VIDEO_SUFFIXES, f"not a video ({op} takes videos)"
    taken, skipped = [], []
    for path in sorted(folder.iterdir()):
        if path.name.startswith("."):
            skipped.append((path, "hidden"))
        elif path.is_dir():
            skipped.append((path, "a folder (subfolders are not sent)"))
        elif not path.is_file():
            skipped.append((path, "not a regular file"))
        elif path.suffix.lower() not in suffixes:
            skipped.append((path, what))
        else:
            taken.append(path)
    return taken, skipped


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
