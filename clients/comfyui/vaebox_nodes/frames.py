"""ComfyUI's tensor layouts and the box's: IMAGE frames `[N, H, W, 3]` in 0..1, a VAE's pixels
`[1, 3, T, H, W]` in -1..1, and LATENT `{"samples": [B, C, T, h, w]}`."""
import numpy as np
import torch


def image_to_pixels(image):
    """IMAGE `[N, H, W, 3]` 0..1 → one clip `[1, 3, N, H, W]` in -1..1, float32 numpy."""
    frames = image_frames(image)
    return (frames.transpose(3, 0, 1, 2)[None] * 2.0 - 1.0).astype(np.float32)


def pixels_to_image(pixels):
    """`[1, 3, T, H, W]` (or `[B, 3, T, H, W]`, batches one after the other) in -1..1 → IMAGE `[B*T, H, W, 3]` 0..1."""
    pixels = np.asarray(pixels, dtype=np.float32)
    if pixels.ndim != 5 or pixels.shape[1] != 3:
        raise ValueError(f"expected decoded frames [B, 3, T, H, W], got {list(pixels.shape)}")
    frames = pixels.transpose(0, 2, 3, 4, 1).reshape(-1, pixels.shape[3], pixels.shape[4], 3)
    return torch.from_numpy(np.clip((frames + 1.0) * 0.5, 0.0, 1.0).copy())


def image_frames(image):
    """IMAGE as float32 numpy `[N, H, W, 3]`; other channel counts are refused (an alpha channel is not video)."""
    frames = image.detach().cpu().float().numpy() if isinstance(image, torch.Tensor) else np.asarray(image, np.float32)
    if frames.ndim == 3:
        frames = frames[None]
    if frames.ndim != 4 or frames.shape[3] != 3:
        raise ValueError(f"expected IMAGE frames [N, H, W, 3], got {list(frames.shape)}")
    return frames


def image_to_rgb8(image):
    """IMAGE → uint8 `[N, H, W, 3]`: the box reads video at 8 bits per sample, so this is all it would see."""
    return np.round(np.clip(image_frames(image), 0.0, 1.0) * 255.0).astype(np.uint8)


def latent_items(latent):
    """LATENT → its items `[1, C, T, h, w]` float32 numpy; a 4-D `[B, C, h, w]` latent is one frame per item."""
    samples = latent["samples"]
    samples = samples.detach().cpu().float().numpy() if isinstance(samples, torch.Tensor) else np.asarray(samples, np.float32)
    if samples.ndim == 4:
        samples = samples[:, :, None]
    if samples.ndim != 5:
        raise ValueError(f"expected a video LATENT [B, C, T, h, w], got {list(samples.shape)}")
    return [np.ascontiguousarray(samples[i : i + 1]) for i in range(samples.shape[0])]


def to_latent(items):
    """The box's latents `[1, C, t, h, w]` → LATENT `{"samples": [B, C, t, h, w]}`."""
    return {"samples": torch.from_numpy(np.concatenate(items, axis=0).astype(np.float32))}
