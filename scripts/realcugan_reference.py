#!/usr/bin/env python3
"""Run a Real-CUGAN ncnn model with the real ncnn engine (PyPI `ncnn`) as the parity reference, on one whole
frame, with the padding and cropping realcugan-ncnn-vulkan puts around the network.

The ncnn graph alone is not the model: its convolutions are unpadded, so realcugan-ncnn-vulkan
(src/main.cpp, src/realcugan.cpp, realcugan_preproc.comp) first pads the frame by reflection, by 18 pixels
per side for 2x, 14 for 3x, 19 for 4x, plus, at the bottom and right, what makes the frame's sides a multiple
of 2 (2x, 4x) or 4 (3x); it keeps the top-left `scale`×(H, W) of the output, and for 4x adds the frame
upscaled 4x by nearest neighbour (realcugan_4x_postproc.comp). A frame no larger than the tool's tile size
is one tile, so this is what the tool computes (with its syncgap modes off, as they are for one tile).

The engine settings, the input (an image crop or a raw float32 CHW file) and the outputs are those of
ncnn_reference.py: fp32 on the CPU, raw little-endian float32 CHW, unclamped, and a JSON line on stdout.

    realcugan_reference.py --param M.param --bin M.bin --scale 2 --image astronaut.png --crop X,Y,W,H \
        --input-out in.f32 --output-out out.f32 [--repeat N] [--threads 2]
"""

import sys

import numpy as np

from ncnn_reference import common_parser, read_input, report, run_timed

# realcugan-ncnn-vulkan's main.cpp: `prepadding` by scale, and realcugan.cpp: the multiple each padded side
# is rounded up to (`prepadding_bottom`, `prepadding_right`).
PREPADDING = {2: 18, 3: 14, 4: 19}
SIDE_MULTIPLE = {2: 2, 3: 4, 4: 2}


def parse_args():
    p = common_parser(__doc__)
    p.add_argument("--scale", type=int, required=True, choices=sorted(PREPADDING))
    return p.parse_args()


def reflected(length: int, before: int, after: int) -> np.ndarray:
    """Source index of each padded position, as realcugan_preproc.comp computes it."""
    position = np.arange(-before, length + after)
    position = np.abs(position)
    position = (length - 1) - np.abs(position - (length - 1))
    if position.min() < 0:
        sys.exit(f"a side of {length} px is too short for {before} px of reflection padding (the tool reads outside the frame)")
    return position


def pad_frame(chw: np.ndarray, scale: int) -> np.ndarray:
    _, height, width = chw.shape
    pad, multiple = PREPADDING[scale], SIDE_MULTIPLE[scale]
    rows = reflected(height, pad, pad + (-height) % multiple)
    cols = reflected(width, pad, pad + (-width) % multiple)
    return np.ascontiguousarray(chw[:, rows][:, :, cols])


def main():
    args = parse_args()
    chw = read_input(args)
    if args.input_out:
        chw.astype("<f4").tofile(args.input_out)
    padded = pad_frame(chw, args.scale)
    _, height, width = chw.shape

    def finish(output):
        # The tool's crop to scale × the frame, and the 4x model's nearest-neighbour input added back.
        output = output[:, : height * args.scale, : width * args.scale]
        return output + chw.repeat(4, axis=1).repeat(4, axis=2) if args.scale == 4 else output

    output, seconds = run_timed(args, padded, finish)
    report(args, chw, output, seconds, padded_shape=list(padded.shape))


if __name__ == "__main__":
    main()
