"""Loads clients/comfyui the way ComfyUI loads a custom node package and calls its nodes against a running box
with tensors in ComfyUI's layouts. Prints one JSON object of measurements; tests/it/comfyui_nodes.rs asserts on it.

usage: comfyui_nodes_check.py BASE_URL TOKEN PACKAGE_DIR CASE_FILE FRAMES_RGB24 WIDTH HEIGHT REFERENCE_ZIP SECOND_URL
  BASE_URL       the box: the small Wan 2.1 VAE (wan21-small), SeedVR2 (seedvr2-*-small) and FlashVSR (FlashVSR)
  TOKEN          the box's access token
  CASE_FILE      the Wan 2.1 reference case (sample, latent_mu, latent_mu_normalized, decoded)
  FRAMES_RGB24   a few frames of a real clip, packed rgb24
  REFERENCE_ZIP  the box's own upscale of those frames (realesrgan-animevideov3 x2, output_format=png)
  SECOND_URL     a second box, no token, whose only model is the small Wan 2.1 VAE as wan21-second
"""
import importlib.util
import inspect
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import types
import urllib.request
import zipfile

from comfyui_loading import load_like_comfyui
import numpy as np
import torch
from safetensors.torch import load_file

base, token, package_dir, case_file, frames_file, width, height, reference_zip, second_base = sys.argv[1:10]
width, height = int(width), int(height)
out = {}

# The model lists are read from the boxes ComfyUI is told about; first from none (the README's names).
os.environ["COMFY_VAEBOX_URL"] = "http://127.0.0.1:9"




def spec_problems(cls):
    """What ComfyUI would reject in a node class."""
    problems = []
    types_ = cls.INPUT_TYPES()
    if not isinstance(types_, dict) or "required" not in types_ or set(types_) - {"required", "optional", "hidden"}:
        return [f"INPUT_TYPES keys {list(types_)}"]
    for section in types_.values():
        for name, spec in section.items():
            ok = isinstance(spec, tuple) and 1 <= len(spec) <= 2 and (isinstance(spec[0], str) or isinstance(spec[0], list))
            ok = ok and (len(spec) == 1 or isinstance(spec[1], dict))
            if ok and isinstance(spec[0], list) and len(spec) == 2 and "default" in spec[1]:
                ok = spec[1]["default"] in spec[0]
            if not ok:
                problems.append(f"input {name}: {spec!r}")
    if not (isinstance(cls.RETURN_TYPES, tuple) and all(isinstance(t, str) for t in cls.RETURN_TYPES)):
        problems.append("RETURN_TYPES")
    if not callable(getattr(cls, cls.FUNCTION, None)):
        problems.append(f"FUNCTION {cls.FUNCTION}")
    if cls.CATEGORY != "vaebox":
        problems.append(f"CATEGORY {cls.CATEGORY}")
    return problems


def box(method, path, body=None):
    request = urllib.request.Request(base + path, data=body, method=method, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def error_of(call):
    """The text of what `call()` raises; None when it raises nothing."""
    try:
        call()
    except Exception as e:
        return str(e)


class Source:  # an upstream node (a sampler, a loader): what it hands on is known only when it runs
    INPUT_TYPES = classmethod(lambda cls: {"required": {}})
    RETURN_TYPES = ("LATENT", "IMAGE", "VAEBOX")


def validate_like_comfyui(prompt, node_id, validated):
    """A model, written here, of what ComfyUI's execution.validate_inputs (0.3.x) does with these nodes (read for
    its behaviour, not copied): a linked input's node is validated first; a constant COMBO value not in its list is "Value not in list" unless VALIDATE_INPUTS names that input;
    then VALIDATE_INPUTS gets the named inputs, a linked one as None. The node's errors; [] when valid."""
    if node_id in validated:
        return validated[node_id]
    node = prompt[node_id]
    cls = dict(nodes, Source=Source)[node["class_type"]]
    spec = cls.INPUT_TYPES()
    declared = {**spec["required"], **spec.get("optional", {})}
    validate = getattr(cls, "VALIDATE_INPUTS", None)
    named = inspect.getfullargspec(validate).args if validate else []
    errors = []
    for name, value in node["inputs"].items():
        kind = declared[name][0]
        if isinstance(value, list):
            if validate_like_comfyui(prompt, value[0], validated):
                errors.append(f"{name}: its node is invalid")
        elif name not in named and isinstance(kind, list) and value not in kind:
            listed = f"(list of length {len(kind)})" if len(kind) > 20 else str(kind)
            errors.append(f"Value not in list: {name}: '{value}' not in {listed}")
    if validate:
        given = {k: None if isinstance(v, list) else v for k, v in node["inputs"].items() if k in named}
        verdict = validate(**given)
        if verdict is not True:
            errors.append(f"Custom validation failed for node: {verdict}")
    validated[node_id] = errors
    return errors


def prompt_errors(class_type, url, **inputs):
    """The errors ComfyUI's validation gives a prompt where `class_type` takes `inputs` and a connection to `url`
    (None: from a loader) and Source's outputs; [] when it would run."""
    connection = {"class_type": "VaeboxConnection", "inputs": {"url": url}} if url else {"class_type": "Source", "inputs": {}}
    links = {"samples": ["source", 0], "images": ["source", 1], "pixels": ["source", 1], "vaebox": ["box", 0]}
    wanted = [n for n in nodes[class_type].INPUT_TYPES()["required"] if n in links]
    node = {"class_type": class_type, "inputs": dict({n: links[n] for n in wanted}, **inputs)}
    prompt = {"source": {"class_type": "Source", "inputs": {}}, "box": connection, "node": node}
    validated = {}
    return validate_like_comfyui(prompt, "box", validated) + validate_like_comfyui(prompt, "node", validated)


package = load_like_comfyui(package_dir)
nodes = package.NODE_CLASS_MAPPINGS
out["nodes"] = sorted(nodes)
out["display_names"] = sorted(package.NODE_DISPLAY_NAME_MAPPINGS.values())
out["comfy_loaded"] = "comfy" in sys.modules
out["spec_problems"] = {name: spec_problems(cls) for name, cls in nodes.items()}
# No box answers: still a COMBO, and a name typed for a box (in a saved workflow or an API prompt) passes.
without_box = nodes["VaeboxVAEDecode"].INPUT_TYPES()["required"]["model"]
out["decode_model_input_without_box"] = "COMBO" if isinstance(without_box[0], list) else without_box[0]
out["typed_name_without_box_errors"] = prompt_errors("VaeboxVAEDecode", None, model="wan21-small")
os.environ["COMFY_VAEBOX_URL"] = base
os.environ["COMFY_VAEBOX_TOKEN"] = token
decode_model = nodes["VaeboxVAEDecode"].INPUT_TYPES()["required"]["model"]
out["decode_model_input"] = decode_model[0]
out["decode_model_default"] = decode_model[1]["default"]
# Precision on every node that computes (the connection only connects).
out["precision_inputs"] = sorted(n for n, c in nodes.items() if "precision" in c.INPUT_TYPES().get("optional", {}))
out["upscale_model_input_has_animevideov3"] = "realesrgan-animevideov3" in nodes["VaeboxUpscale"].INPUT_TYPES()["required"]["model"][0]
out["restore_model_input"] = nodes["VaeboxRestore"].INPUT_TYPES()["required"]["model"][0]
# FlashVSR's node lists the box's FlashVSR models only, and decodes with `tiny` (the default) or a Wan 2.1 VAE.
flashvsr_inputs = nodes["VaeboxFlashVSRRestore"].INPUT_TYPES()["required"]
out["flashvsr_model_input"] = flashvsr_inputs["model"][0]
out["flashvsr_decoder_input"] = flashvsr_inputs["decoder"][0]
out["flashvsr_defaults"] = {name: flashvsr_inputs[name][1]["default"] for name in ("decoder", "seed", "fit", "color_fix")}
out["spec_problems_with_box"] = {name: spec_problems(cls) for name, cls in nodes.items()}

# A connection node pointing at a second box: a model only it has passes validation, joins the listed names, runs.
out["second_box_prompt_errors"] = prompt_errors("VaeboxVAEDecode", second_base, model="wan21-second")
out["decode_model_input_after_second_box"] = nodes["VaeboxVAEDecode"].INPUT_TYPES()["required"]["model"][0]
(second_box,) = nodes["VaeboxConnection"]().connect(second_base, "")
# A name no known box serves for the op is refused before anything runs, in the box's words (its op's models);
# a VAE for an upscale as the box says it (it cannot do the op).
out["unknown_model_prompt_errors"] = prompt_errors("VaeboxUpscale", base, model="no-such-model")
out["wrong_op_prompt_errors"] = prompt_errors("VaeboxUpscale", base, model="wan21-small")
# A restore model for the other restore node is refused with where it belongs; so is a decoder that is no Wan 2.1 VAE.
out["flashvsr_in_restore_node_errors"] = prompt_errors("VaeboxRestore", base, model="FlashVSR")
out["seedvr2_in_flashvsr_node_errors"] = prompt_errors("VaeboxFlashVSRRestore", base, model="seedvr2-3b-small", decoder="tiny")
out["flashvsr_wrong_decoder_errors"] = prompt_errors("VaeboxFlashVSRRestore", base, model="FlashVSR", decoder="seedvr2-vae-small")
out["flashvsr_prompt_errors"] = prompt_errors("VaeboxFlashVSRRestore", base, model="FlashVSR", decoder="wan21-small")

os.environ.pop("COMFY_VAEBOX_TOKEN")
out["no_token_error"] = error_of(lambda: nodes["VaeboxConnection"]().connect(base, ""))
(vaebox,) = nodes["VaeboxConnection"]().connect(base, token)

# VAE decode and encode in f32 (the box's own dtype may be bf16), on the case's first 2 latent frames: the
# reference's README shows decode(z[:, :, :k]) equal to the first 1 + 4(k - 1) frames of the whole decode and
# encode(x[:, :, :1 + 4k]) to the latent's prefix, and half the clip halves the test's time.
# ComfyUI's LATENT holds the VAE's raw latent (its samplers normalize inside and undo it on the way out), so the
# node's default decodes latent_mu as it is; `normalized` takes latent_mu_normalized.
case = load_file(case_file)
LATENT_FRAMES, FRAMES = 2, 5
expected_image = ((case["decoded"][:, :, :FRAMES].clamp(-1, 1) + 1) / 2)[0].permute(1, 2, 3, 0)  # [T, H, W, 3]
decode = nodes["VaeboxVAEDecode"]()
(image,) = decode.decode(vaebox, {"samples": case["latent_mu"][:, :, :LATENT_FRAMES]}, "wan21-small", precision="f32")
out["decode_shape"] = list(image.shape)
out["decode_dtype"] = str(image.dtype)
out["decode_max_abs"] = (image - expected_image).abs().max().item()
normalized = case["latent_mu_normalized"][:, :, :LATENT_FRAMES]
(image,) = decode.decode(vaebox, {"samples": normalized}, "wan21-small", normalized=True, precision="f32")
out["decode_normalized_max_abs"] = (image - expected_image).abs().max().item()
(image,) = decode.decode(second_box, {"samples": case["latent_mu"][:, :, :LATENT_FRAMES]}, "wan21-second", precision="f32")
out["second_box_decode_max_abs"] = (image - expected_image).abs().max().item()
# The second box refuses the first box's VAE, naming its own.
out["second_box_unknown_model_error"] = error_of(lambda: decode.decode(second_box, {"samples": case["latent_mu"][:, :, :1]}, "wan21-small"))

# VAE encode: IMAGE frames of the reference sample.
pixels = ((case["sample"][:, :, :FRAMES] + 1) / 2)[0].permute(1, 2, 3, 0).contiguous()
encode = nodes["VaeboxVAEEncode"]()
(latent,) = encode.encode(vaebox, pixels, "wan21-small", precision="f32")
out["encode_shape"] = list(latent["samples"].shape)
out["encode_max_abs"] = (latent["samples"] - case["latent_mu"][:, :, :LATENT_FRAMES]).abs().max().item()
(latent,) = encode.encode(vaebox, pixels, "wan21-small", normalized=True, precision="f32")
out["encode_normalized_max_abs"] = (latent["samples"] - normalized).abs().max().item()

# ComfyUI present: a progress bar that records, a Cancel flag the test sets.
updates, cancel_requested = [], [False]


class Interrupted(Exception):
    pass


class ProgressBar:
    def __init__(self, total):
        self.total = total

    def update_absolute(self, value, total=None, preview=None):
        updates.append((value, total or self.total))


def throw_exception_if_processing_interrupted():
    if cancel_requested[0]:
        cancel_requested[0] = False
        raise Interrupted()


comfy = types.ModuleType("comfy")
comfy.utils = types.ModuleType("comfy.utils")
comfy.utils.ProgressBar = ProgressBar
comfy.model_management = types.ModuleType("comfy.model_management")
comfy.model_management.processing_interrupted = lambda: cancel_requested[0]
comfy.model_management.throw_exception_if_processing_interrupted = throw_exception_if_processing_interrupted
sys.modules.update({"comfy": comfy, "comfy.utils": comfy.utils, "comfy.model_management": comfy.model_management})
# ComfyUI's progress text under the running node (node 7 here), recorded.
node_texts = []
comfy_execution = types.ModuleType("comfy_execution")
comfy_execution.utils = types.ModuleType("comfy_execution.utils")
comfy_execution.utils.get_executing_context = lambda: types.SimpleNamespace(prompt_id="prompt", node_id="7", list_index=None)
prompt_server = types.SimpleNamespace(send_progress_text=lambda text, node_id: node_texts.append((text, node_id)))
server_module = types.ModuleType("server")
server_module.PromptServer = types.SimpleNamespace(instance=prompt_server)
sys.modules.update({"comfy_execution": comfy_execution, "comfy_execution.utils": comfy_execution.utils, "server": server_module})

# Every poll of a job (`GET /v1/jobs/{id}`) the nodes make; following the event stream makes none.
polls = []
connection_class = package.vaebox_nodes.connection.Connection
plain_request = connection_class.request


def counting_request(self, method, path, *args, **kwargs):
    if method == "GET" and path.startswith("/v1/jobs/") and path.count("/") == 3:
        polls.append(path)
    return plain_request(self, method, path, *args, **kwargs)


connection_class.request = counting_request

# Upscale: real frames, against the box's own job on the same frames.
frames = np.fromfile(frames_file, np.uint8).reshape(-1, height, width, 3)
images = torch.from_numpy(frames.astype(np.float32) / 255.0)
started = time.monotonic()
upscaled, upscale_audio = nodes["VaeboxUpscale"]().upscale(vaebox, images, "realesrgan-animevideov3", 2, 24.0)
out["upscale_seconds"] = time.monotonic() - started
out["upscale_shape"] = list(upscaled.shape)
out["upscale_dtype"] = str(upscaled.dtype)
out["upscale_audio"] = upscale_audio
out["progress_last"] = list(updates[-1]) if updates else None
out["progress_updates"] = len(updates)
out["upscale_polls"] = len(polls)

# A box or proxy without the event stream: the node polls instead, to the same frames.
events_module = package.vaebox_nodes.events
stream_path, events_module.PATH = events_module.PATH, "/v1/jobs/{id}/no-such-stream"
updates.clear()
again, _ = nodes["VaeboxUpscale"]().upscale(vaebox, images, "realesrgan-animevideov3", 2, 24.0)
events_module.PATH = stream_path
out["fallback_polls"] = len(polls) - out["upscale_polls"]
out["fallback_progress_last"] = list(updates[-1]) if updates else None
out["fallback_max_abs"] = float((again - upscaled).abs().max())
with tempfile.TemporaryDirectory() as scratch:
    with zipfile.ZipFile(reference_zip) as archive:
        archive.extractall(scratch)
    decoded = subprocess.run(
        ["ffmpeg", "-nostdin", "-v", "error", "-i", os.path.join(scratch, "frame_%06d.png"), "-f", "rawvideo", "-pix_fmt", "rgb48le", "-"],
        check=True, capture_output=True, timeout=60,
    ).stdout
reference = np.frombuffer(decoded, "<u2").astype(np.float32).reshape(-1, 2 * height, 2 * width, 3) / 65535.0
out["reference_shape"] = list(reference.shape)
if reference.shape == tuple(upscaled.shape):
    out["upscale_max_abs"] = float(np.abs(upscaled.numpy() - reference).max())
# The upscale changed the frames (not an echo of its input).
out["upscale_vs_nearest_max_abs"] = float(np.abs(upscaled.numpy() - np.repeat(np.repeat(images.numpy(), 2, 1), 2, 2)).max())

# An error code becomes a readable exception.
out["unknown_model_error"] = error_of(lambda: nodes["VaeboxUpscale"]().upscale(vaebox, images, "no-such-model", 2, 24.0))
# Upscale's precision reaches the box as its job's dtype.
out["upscale_precision_error"] = error_of(lambda: nodes["VaeboxUpscale"]().upscale(vaebox, images, "realesrgan-animevideov3", 2, 24.0, precision="f32"))
out["upscale_job_dtype"] = box("GET", "/v1/jobs?limit=1")["jobs"][0]["params"].get("dtype")
out["unreachable_error"] = error_of(lambda: nodes["VaeboxConnection"]().connect("http://127.0.0.1:9", ""))


def blocker():
    """A decode that keeps the box busy for a few seconds, so the next job waits in the queue."""
    # Long, so it is still running at the end; it is cancelled then, which takes one chunk's time.
    latent = package.vaebox_nodes.tensor_file.write("latent", np.zeros((1, 16, 41, 40, 60), np.float32))
    return box("POST", "/v1/jobs?op=vae_decode&model=wan21-small&output_format=safetensors&filename=busy.safetensors", latent)["id"]


def settle(job_id, within=10.0):
    deadline = time.monotonic() + within
    while True:
        job = box("GET", f"/v1/jobs/{job_id}")
        if job["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            return job["status"]
        time.sleep(0.1)


def sine(seconds, rate=44100, channels=2):
    """ComfyUI's AUDIO: a 440 Hz tone at half scale, the right channel a quarter turn behind."""
    t = torch.arange(int(round(seconds * rate)), dtype=torch.float32) / rate
    waveform = torch.stack([torch.sin(2 * math.pi * 440 * t + c * math.pi / 2) for c in range(channels)])[None] * 0.5
    return {"waveform": waveform, "sample_rate": rate}


def audio_measures(prefix, given, returned):
    out[prefix + "_audio_rate"] = returned["sample_rate"] if returned else None
    if returned:
        out[prefix + "_audio_shape"] = list(returned["waveform"].shape)
        out[prefix + "_audio_samples_in"] = given["waveform"].shape[2]
        common = min(given["waveform"].shape[2], returned["waveform"].shape[2])
        out[prefix + "_audio_max_abs"] = float((returned["waveform"][..., :common] - given["waveform"][..., :common]).abs().max())


# Sound through an upscale: the box keeps it and the node hands it back with the frames.
tone = sine(len(images) / 24.0)
with_sound, sound = nodes["VaeboxUpscale"]().upscale(vaebox, images, "realesrgan-animevideov3", 2, 24.0, audio=tone)
out["upscale_with_audio_max_abs"] = float((with_sound - upscaled).abs().max())
audio_measures("upscale", tone, sound)

# Restore end to end with the small SeedVR2 (random weights, real structure), with sound.
updates.clear()
restored, sound = nodes["VaeboxRestore"]().restore(vaebox, images, "seedvr2-3b-small", 1, 0, 7, "wavelet", 24.0, audio=tone)
out["restore_shape"] = list(restored.shape)
out["restore_vs_input_max_abs"] = float((restored - images).abs().max()) if restored.shape == images.shape else None
out["restore_progress_last"] = list(updates[-1]) if updates else None
audio_measures("restore", tone, sound)

# FlashVSR end to end with the small model, Full (the box's Wan 2.1 VAE), a seed, no colour fix, the default fit
# (the whole picture): the fields FlashVSR takes, none of SeedVR2's.
flashvsr, flashvsr_audio = nodes["VaeboxFlashVSRRestore"]().restore(vaebox, images, "FlashVSR", "wan21-small", 3, "pad", "none", 24.0, precision="f32")
out["flashvsr_shape"] = list(flashvsr.shape)
out["flashvsr_audio"] = flashvsr_audio
flashvsr_job = box("GET", "/v1/jobs/" + box("GET", "/v1/jobs?limit=1")["jobs"][0]["id"])
out["flashvsr_job_params"] = flashvsr_job["params"]
out["flashvsr_job_plan"] = flashvsr_job["plan"]


def newest_job():
    return box("GET", "/v1/jobs?limit=1")["jobs"][0]


# Cancel in ComfyUI while the node's job runs: the flag is set once the box reports the job running.
def cancel_once_running(seen, after):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = newest_job()
        if job["id"] != after and job["status"] == "running":
            seen.append(job)
            cancel_requested[0] = True
            return
        time.sleep(0.05)


seen_running = []
watcher = threading.Thread(target=cancel_once_running, args=(seen_running, newest_job()["id"]))
watcher.start()
try:
    decode.decode(vaebox, {"samples": torch.zeros(1, 16, 21, 40, 60)}, "wan21-small")
    out["running_cancel_raised"] = None
except Interrupted:
    out["running_cancel_raised"] = "comfy"
watcher.join()
out["running_cancel_seen"] = seen_running[0]["status"] if seen_running else None
if seen_running:
    out["running_cancel_job_status"] = settle(seen_running[0]["id"], within=120.0)

# Cancel in ComfyUI while the node's job waits: the job is cancelled on the box and the node raises.
busy = blocker()
cancel_requested[0] = True
try:
    decode.decode(vaebox, {"samples": case["latent_mu"]}, "wan21-small")
    out["cancel_raised"] = None
except Interrupted:
    out["cancel_raised"] = "comfy"
node_job = newest_job()
out["cancelled_job_op"] = node_job["op"]
out["cancelled_job_status"] = settle(node_job["id"])

# Restore's inputs become fields the box takes (it checks them all before queueing; the small DiT is not run).
cancel_requested[0] = True
try:
    nodes["VaeboxRestore"]().restore(vaebox, images, "seedvr2-3b-small", 2, 64, 7, "lab", 24.0, precision="bf16")
    out["restore_cancel_raised"] = None
except Interrupted:
    out["restore_cancel_raised"] = "comfy"
except TypeError as e:  # a node without the input
    out["restore_cancel_raised"] = repr(e)
node_job = newest_job()
out["restore_job_op"] = node_job["op"]
out["restore_job_params"] = node_job["params"]
out["restore_job_status"] = settle(node_job["id"])

# The same for an encode, a synchronous call: cancelling hangs up, and the box cancels its job. A synchronous
# call does not wait behind the busy job (it runs at that job's next chunk end), so it is long enough to be
# running still when the cancel comes: 49 frames of 192×256.
cancel_requested[0] = False
timer = threading.Timer(1.0, lambda: cancel_requested.__setitem__(0, True))
timer.start()
try:
    encode.encode(vaebox, torch.rand(49, 192, 256, 3, generator=torch.Generator().manual_seed(3)), "wan21-small")
    out["encode_cancel_raised"] = None
except Interrupted:
    out["encode_cancel_raised"] = "comfy"
node_job = newest_job()
out["encode_cancelled_job_op"] = node_job["op"]
out["encode_cancelled_job_status"] = settle(node_job["id"])


# Paused on the box while the node waits (from the box's page, say): not a failure. The node shows its place in
# the queue, then that it is paused, and once it is resumed (and the busy job cancelled) returns the frames.
def pause_then_resume(seen):
    deadline = time.monotonic() + 60
    job = newest_job()
    while time.monotonic() < deadline and not (job["id"] != busy and any("position" in text for text, _ in node_texts)):
        time.sleep(0.05)
        job = newest_job()
    seen.append(box("POST", f"/v1/jobs/{job['id']}/pause", b"")["status"])
    while time.monotonic() < deadline and not any("paused" in text for text, _ in node_texts):
        time.sleep(0.05)
    seen.append(box("POST", f"/v1/jobs/{job['id']}/resume", b"")["status"])
    box("POST", f"/v1/jobs/{busy}/cancel", b"")


cancel_requested[0] = False
node_texts.clear()
paused_seen = []
watcher = threading.Thread(target=pause_then_resume, args=(paused_seen,))
watcher.start()
try:
    (image,) = decode.decode(vaebox, {"samples": case["latent_mu"][:, :, :1]}, "wan21-small")
    out["paused_decode_shape"] = list(image.shape)
except Exception as e:
    out["paused_decode_error"] = str(e)
watcher.join()
out["paused_seen"] = paused_seen
out["paused_node_texts"] = node_texts
out["blocker_status"] = settle(busy, within=120.0)

print(json.dumps(out))
