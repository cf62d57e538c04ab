"""Saves `pos_emb` of a safetensors file with torch.save, as SeedVR2 ships it (`pos_emb.pt`).
usage: save_pos_emb_pt.py TEXT_EMBEDS.safetensors OUT.pt"""
import sys

import torch
from safetensors.torch import load_file

torch.save(load_file(sys.argv[1])["pos_emb"], sys.argv[2])
