#!/usr/bin/env python3
"""Whether Winograd F(2x2, 3x3) built from libtorch's own operators beats its direct 3x3x3 convolution.

The Wan VAE's f32 convolutions already run near the CPU's matmul peak (docs/benchmarks.md), so a faster
f32 VAE needs fewer multiplications. Winograd F(2x2, 3x3) on the spatial taps needs 16 instead of 36 per
2x2 output tile; the three causal temporal taps become three accumulated batched matmuls. This probe
times that against the direct convolution (channels-last-3d, oneDNN, as ours runs) on the encoder's
shapes, and checks that both agree. Usage: .venv/bin/python scripts/bench/winograd_probe.py [--threads 2]
"""
import argparse
import time

import torch

# F(2x2, 3x3) transforms (Lavin & Gray, 2015).
B_T_ROWS = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))


def input_transform(d, axis_first):
    """B^T d along one of the two leading tile axes (4 taps -> 4 taps), from sums of slices."""
    pick = (lambda i: d[i]) if axis_first else (lambda i: d[:, i])
    parts = [pick(0) - pick(2), pick(1) + pick(2), pick(2) - pick(1), pick(1) - pick(3)]
    return torch.stack(parts, dim=0 if axis_first else 1)


def winograd_conv3d(x, w, b):
    """Causal 3x3x3 convolution, spatial padding 1: x [N, C, T, H, W] holds 2 history frames first."""
    n, c, t, h, wd = x.shape
    co = w.shape[0]
    hp, wp = (h + 1) // 2 * 2, (wd + 1) // 2 * 2
    xp = torch.nn.functional.pad(x, (1, 1 + wp - wd, 1, 1 + hp - h))
    tiles = xp.unfold(3, 4, 2).unfold(4, 4, 2).permute(5, 6, 0, 2, 3, 4, 1)  # [4, 4, N, T, th, tw, C]
    v = input_transform(input_transform(tiles, True), False)
    th, tw = v.shape[4], v.shape[5]
    v = v.reshape(16, n, t, th * tw, c)
    g = torch.tensor(G, dtype=x.dtype)
    u = torch.einsum("ik,ocdkl,jl->ijdco", g, w, g).reshape(16, 3, c, co).contiguous()
    t_out = t - 2
    m = torch.empty(16, n * t_out * th * tw, co, dtype=x.dtype)
    for dt in range(3):
        v_dt = v[:, :, dt : dt + t_out].reshape(16, n * t_out * th * tw, c)
        if dt == 0:
            torch.bmm(v_dt, u[:, dt], out=m)
        else:
            m.baddbmm_(v_dt, u[:, dt])
    m = m.reshape(4, 4, n, t_out, th, tw, co)
    rows = torch.stack([m[0] + m[1] + m[2], m[1] - m[2] - m[3]])
    out = torch.stack([rows[:, 0] + rows[:, 1] + rows[:, 2], rows[:, 1] - rows[:, 2] - rows[:, 3]], dim=1)
    out = out.permute(2, 6, 3, 4, 0, 5, 1).reshape(n, co, t_out, th * 2, tw * 2)[..., :h, :wd]
    return out + b.view(1, -1, 1, 1, 1)


def direct_conv3d(x, w, b):
    return torch.nn.functional.conv3d(torch.nn.functional.pad(x, (1, 1, 1, 1, 0, 0)), w, b)


def best_seconds(run, repeats=3):
    run()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} threads, f32; each call has 2 history frames before its output frames")
    print("| channels | frame | output frames | direct ms | winograd ms | direct / winograd | max rel. difference |")
    print("|---|---|---:|---:|---:|---:|---:|")
    with torch.no_grad():
        for c, t, side in [(96, 6, 128), (192, 6, 64), (384, 6, 32), (384, 11, 16)]:
            x = torch.randn(1, c, t, side, side)
            w = torch.randn(c, c, 3, 3, 3) * 0.05
            b = torch.randn(c)
            x_cl = x.contiguous(memory_format=torch.channels_last_3d)
            w_cl = w.contiguous(memory_format=torch.channels_last_3d)
            want = direct_conv3d(x_cl, w_cl, b)
            diff = ((winograd_conv3d(x, w, b) - want).abs().max() / want.abs().max()).item()
            direct = best_seconds(lambda: direct_conv3d(x_cl, w_cl, b))
            winograd = best_seconds(lambda: winograd_conv3d(x, w, b))
            print(f"| {c} → {c} | {side}² | {t - 2} | {direct * 1e3:.1f} | {winograd * 1e3:.1f} | {direct / winograd:.2f}× | {diff:.1e} |")


if __name__ == "__main__":
    main()
