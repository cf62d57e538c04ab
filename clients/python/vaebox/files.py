"""Where results go on this machine: never over an existing file, and which files of a folder to send (not the
results this client saved there)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

# What a folder submission sends: video containers ffmpeg reads (the box probes each; anything else it
# refuses with not-a-video), and the latent files vae_decode takes.
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".ts", ".mts", ".m2ts", ".wmv", ".flv", ".y4m")
LATENT_SUFFIXES = (".safetensors", ".latent")
# Still pictures and zips of PNG frames, which upscale and restore take as well.
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".zip")
PICTURE_OPS = (None, "upscale", "restore")
# Kept whole when a name gets a number: `clip.latent-1.safetensors` would hide what the file is.
DOUBLE_SUFFIXES = (".latent.safetensors",)
# The results `submit --wait` and `download` saved into a folder, one JSON string (a file name) per line. A folder
# submission leaves them out: sent again, a folder's `clip_x4.mp4` would be upscaled ×4 once more.
RESULTS_LIST = ".vaebox-results"
# What the box puts after its input's stem in a result's name (src/queue/output_path.rs, src/queue/keep.rs):
# `_x4`, `_x2fps`, `_60000-1001fps`, `_decoded`, `_reconstructed`, `_restored`, then maybe a range, `_partial-Nf`,
# and this client's `-1` when the name was taken. Results saved before RESULTS_LIST existed are known by it.
RESULT_LABEL = re.compile(r"_(x\d+|\d+(-\d+)?fps|decoded|reconstructed|restored)([_.-]|$)")


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
    saved = saved_results(folder)
    entries = sorted(folder.iterdir())
    stems = {path.name[: len(path.name) - len(path.suffix)]: path.name for path in entries if path.suffix.lower() in suffixes}
    for path in entries:
        source = result_source(path.name, stems)
        if path.name in saved:
            skipped.append((path, f"a result this client saved here (listed in {RESULTS_LIST}); name the file to send it"))
        elif source is not None:
            skipped.append((path, f"named as the box names a result of {source}; name the file to send it"))
        elif path.name.startswith("."):
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


def result_source(name: str, stems: Dict[str, str]) -> Optional[str]:
    """The folder's file (of those `stems` → names) that `name` reads as the box's result of (`clip_x4.mp4` of
    `clip.mp4`), or None."""
    for stem, source in stems.items():
        if name != source and name.startswith(stem) and RESULT_LABEL.match(name, len(stem)):
            return source
    return None


def saved_results(folder: Path) -> set:
    """The names RESULTS_LIST holds (none when there is no list, or a line is not a name)."""
    try:
        lines = (folder / RESULTS_LIST).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return set()
    names = set()
    for line in lines:
        try:
            name = json.loads(line)
        except ValueError:
            continue
        if isinstance(name, str):
            names.add(name)
    return names


def remember_result(path: Path) -> None:
    """Adds a saved result to its folder's RESULTS_LIST. A folder where the list cannot be written keeps the
    result unlisted (the name rule still knows the box's names), rather than failing a download that worked."""
    try:
        with (path.parent / RESULTS_LIST).open("a", encoding="utf-8") as listed:
            listed.write(json.dumps(path.name) + "\n")
    except OSError:
        pass


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
