"""A Wan 2.2 VAE with the released latent width (z_dim 48, the size the published statistics are for) on a
narrow network, made by diffusers with seeded random weights; tests/it/api_vae.rs serves it.

Usage: make_wan22_z48.py OUT_DIR  -> OUT_DIR/{weights,case}.safetensors and meta.json, as make_wan_cases.py
writes its cases (the same perturbation of diffusers' initial weights, so no tensor is trivially constant).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fixtures"))
from make_wan_cases import WAN22, make_case  # noqa: E402

CONFIG = dict(base_dim=8, decoder_base_dim=12, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
              temperal_downsample=[False, True, True], **WAN22)

if __name__ == "__main__":
    meta = make_case(sys.argv[1], "wan22_z48", CONFIG, [1, 3, 5, 32, 32], seed=480)
    print(f"wan22_z48: mu {meta['mu_shape']}, decoded {meta['decoded_shape']}")
