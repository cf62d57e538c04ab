"""vaebox's ComfyUI nodes: connection/HTTP (connection, errors, remote_vae, jobs, events), ComfyUI's layouts
(frames), files on the wire (tensor_file, apng, png_frames; av_clip with sound, through ffmpeg), ComfyUI hooks
(comfy_hooks, model_choices), the nodes (nodes)."""
