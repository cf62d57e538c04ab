"""The ComfyUI nodes (clients/comfyui) across a restart of their box, driven by tests/it/comfyui_nodes.rs: the
test owns the box and stops or starts it (same data dir, same port) when this script asks, on a line of its own.

usage: comfyui_restart_check.py BASE_URL PACKAGE_DIR DEAD_URL FRAMES
  DEAD_URL  an address where nothing listens (a box a connection node names that is away)
  FRAMES    how many frames the upscale that spans the restart has (enough to be running when the box stops)

Protocol: this script prints `STOP` or `START` and waits for `DONE` on stdin; its last line is one JSON object of
what it saw, which the test asserts on.

1. A prompt naming an unreachable box is let through, and does not switch the model-name check off for a prompt
   naming another, reachable box (nor does a connection whose URL comes from a link).
2. An upscale whose box restarts while its job runs: the node waits for the box, takes up its job again by id, and
   returns the frames; while the box is away a prompt naming it is let through, and once it is back its answer is
   asked again (a wrong name refused).
3. A box away longer than the node waits (RECONNECT_S set to 3 s): the node gives up with `unreachable`, and its
   job is cancelled once the box answers the next node's job.
"""
import importlib.util
import inspect
import json
import os
import sys
import threading
import time
import types
import urllib.request

from comfyui_loading import load_like_comfyui
import numpy as np
import torch

base, package_dir, dead_url, frame_count = sys.argv[1:5]
frame_count = int(frame_count)
os.environ["COMFY_VAEBOX_URL"] = base
out = {}


def ask_the_test(what):
    """Has the test stop or start the box; returns once it did."""
    print(what, flush=True)
    answer = sys.stdin.readline().strip()
    assert answer == "DONE", f"the test answered {answer!r} to {what}"




package = load_like_comfyui(package_dir)
nodes = package.NODE_CLASS_MAPPINGS
jobs_module = package.vaebox_nodes.jobs

# ComfyUI present: its progress text under the running node, recorded, and a Cancel flag nobody sets.
node_texts = []
comfy = types.ModuleType("comfy")
comfy.model_management = types.ModuleType("comfy.model_management")
comfy.model_management.processing_interrupted = lambda: False
comfy_execution = types.ModuleType("comfy_execution")
comfy_execution.utils = types.ModuleType("comfy_execution.utils")
comfy_execution.utils.get_executing_context = lambda: types.SimpleNamespace(prompt_id="prompt", node_id="3", list_index=None)
server_module = types.ModuleType("server")
server_module.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(send_progress_text=lambda text, node: node_texts.append(text)))
sys.modules.update({"comfy": comfy, "comfy.model_management": comfy.model_management, "comfy_execution": comfy_execution,
                    "comfy_execution.utils": comfy_execution.utils, "server": server_module})


class Source:  # an upstream node: what it hands on is known only when it runs
    INPUT_TYPES = classmethod(lambda cls: {"required": {}})
    RETURN_TYPES = ("IMAGE", "VAEBOX", "STRING")


def validate(prompt, node_id, validated):
    """ComfyUI's validate_inputs as comfyui_nodes_check.py models it: linked nodes first, then VALIDATE_INPUTS
    with a linked input as None. The node's errors."""
    if node_id in validated:
        return validated[node_id]
    node = prompt[node_id]
    cls = dict(nodes, Source=Source)[node["class_type"]]
    named = inspect.getfullargspec(cls.VALIDATE_INPUTS).args if hasattr(cls, "VALIDATE_INPUTS") else []
    errors = [f"{name}: its node is invalid" for name, value in node["inputs"].items() if isinstance(value, list) and validate(prompt, value[0], validated)]
    if named:
        verdict = cls.VALIDATE_INPUTS(**{k: None if isinstance(v, list) else v for k, v in node["inputs"].items() if k in named})
        if verdict is not True:
            errors.append(f"Custom validation failed for node: {verdict}")
    validated[node_id] = errors
    return errors


def upscale_prompt_errors(url, model):
    """The errors of a prompt `connection(url) → Upscale(model)`; url None: the connection's url from a link."""
    connection = {"class_type": "VaeboxConnection", "inputs": {"url": url if url is not None else ["source", 2]}}
    upscale = {"class_type": "VaeboxUpscale", "inputs": {"vaebox": ["box", 0], "images": ["source", 0], "model": model}}
    prompt = {"source": {"class_type": "Source", "inputs": {}}, "box": connection, "node": upscale}
    validated = {}
    return validate(prompt, "box", validated) + validate(prompt, "node", validated)


def box(method, path, body=None):
    with urllib.request.urlopen(urllib.request.Request(base + path, data=body, method=method), timeout=30) as response:
        return json.loads(response.read())


def jobs_on_box():
    return box("GET", "/v1/jobs?limit=100")["jobs"]


def wait_for(what, check, within=120.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"never: {what}")


def final_status(job_id):
    final = ("succeeded", "failed", "cancelled")
    return wait_for(f"job {job_id} final", lambda: (lambda status: status if status in final else None)(box("GET", f"/v1/jobs/{job_id}")["status"]))


def frames(count, height=72, width=96):
    """Smooth moving gradients (small as PNG, unlike noise), as ComfyUI's IMAGE [T, H, W, 3] in 0..1."""
    t = torch.arange(count, dtype=torch.float32)[:, None, None]
    y = torch.linspace(0, 1, height)[None, :, None]
    x = torch.linspace(0, 1, width)[None, None, :]
    planes = [(x + t / count) % 1.0, (y + 2 * t / count) % 1.0, (x * y + t / (3 * count)) % 1.0]
    return torch.stack([p.expand(count, height, width) for p in planes], dim=-1).contiguous()


def upscale_in_thread(images, outcome):
    def run():
        started = time.monotonic()
        try:
            (upscaled, _) = nodes["VaeboxUpscale"]().upscale(connection, images, "realesrgan-animevideov3", 2, 24.0)
            outcome["shape"] = list(upscaled.shape)
        except Exception as e:
            outcome["error"] = f"{type(e).__name__}: {e}"
        outcome["seconds"] = time.monotonic() - started

    worker = threading.Thread(target=run)
    worker.start()
    return worker


# 1. An unreachable box named once, then a reachable one: the second prompt's wrong name is refused.
out["dead_box_errors"] = upscale_prompt_errors(dead_url, "no-such-model")
out["after_dead_box_errors"] = upscale_prompt_errors(base, "no-such-model")
out["linked_url_errors"] = upscale_prompt_errors(None, "no-such-model")
out["after_linked_url_errors"] = upscale_prompt_errors(base, "no-such-model")
out["good_name_errors"] = upscale_prompt_errors(base, "realesrgan-animevideov3")

# 2. The box restarts while the node's job runs.
(connection,) = nodes["VaeboxConnection"]().connect(base, "")
before = {job["id"] for job in jobs_on_box()}
outcome = {}
worker = upscale_in_thread(frames(frame_count), outcome)
running = wait_for("the node's job running", lambda: next((j for j in jobs_on_box() if j["id"] not in before and j["status"] == "running"
                                                             and (j.get("progress") or {}).get("done", 0) > 0), None))
ask_the_test("STOP")
stopped_at = time.monotonic()
out["while_away_errors"] = upscale_prompt_errors(base, "no-such-model")
time.sleep(max(0.0, 4.0 - (time.monotonic() - stopped_at)))  # longer than the 2 s in which the node used to fail
out["node_alive_while_away"] = worker.is_alive()
ask_the_test("START")
out["back_errors"] = upscale_prompt_errors(base, "no-such-model")
worker.join(300)
out["restart_outcome"] = outcome
after = [j for j in jobs_on_box() if j["id"] not in before]
out["restart_jobs"] = [{"id": j["id"], "status": j["status"], "attempts": j["attempts"]} for j in after]
out["restart_job_id"] = running["id"]
out["restart_node_texts"] = node_texts[:]

# 3. Away longer than the node waits: it gives up, and the job is cancelled when the box takes the next one.
jobs_module.RECONNECT_S = 3.0
blocker = box("POST", "/v1/jobs?op=upscale&model=realesrgan-animevideov3&scale=4&output_format=png&filename=busy.apng",
              package.vaebox_nodes.apng.encode(np.zeros((2000, 48, 64, 3), np.uint8), 24.0))["id"]
before = {job["id"] for job in jobs_on_box()}
outcome = {}
worker = upscale_in_thread(frames(frame_count), outcome)
given_up = wait_for("the node's job queued", lambda: next((j for j in jobs_on_box() if j["id"] not in before and j["status"] == "queued"), None))
ask_the_test("STOP")
worker.join(60)
out["give_up_outcome"] = outcome
ask_the_test("START")
# The next node's submission cancels the given-up job first; the blocker is cancelled once that job is queued.
known = {job["id"] for job in jobs_on_box()}
after_outcome = {}
worker = upscale_in_thread(frames(3), after_outcome)
wait_for("the next node's job", lambda: any(j["id"] not in known for j in jobs_on_box()))
box("POST", f"/v1/jobs/{blocker}/cancel", b"")
worker.join(300)
out["next_job_outcome"] = after_outcome
out["given_up_job_status"] = final_status(given_up["id"])
print(json.dumps(out), flush=True)
