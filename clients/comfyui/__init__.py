"""vaebox for ComfyUI: VAE decode/encode, upscale and restore handed to a vaebox on the LAN.
ComfyUI imports this file as a package from custom_nodes/ and reads the two mappings."""
from .vaebox_nodes.nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
