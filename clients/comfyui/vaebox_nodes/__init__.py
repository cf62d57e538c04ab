"""vaebox's ComfyUI nodes: connection/HTTP (connection, errors, remote_vae, jobs), ComfyUI's layouts (frames),
files on the wire (tensor_file, apng, png_frames), ComfyUI hooks (comfy_hooks, model_choices), the nodes (nodes)."""
