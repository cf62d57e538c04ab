"""The ComfyUI nodes loaded the way ComfyUI loads a custom node folder (shared by the checks that drive them)."""
import importlib.util
import os
import sys


def load_like_comfyui(path):
    """ComfyUI's load_custom_node: the folder's __init__.py as a module named after the folder."""
    name = os.path.basename(os.path.normpath(path))
    spec = importlib.util.spec_from_file_location(name, os.path.join(path, "__init__.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
