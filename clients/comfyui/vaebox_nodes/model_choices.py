"""The model input of a node, and its check when ComfyUI validates a prompt.

ComfyUI knows the graph's box only when a node runs: `INPUT_TYPES` is a class method, and `VALIDATE_INPUTS` gets
no linked input (the `vaebox` from the connection node arrives as None). So this module keeps the boxes this
ComfyUI has been told about: the one at $COMFY_VAEBOX_URL (token $COMFY_VAEBOX_TOKEN) and each box a connection
node named (when ComfyUI validated it or it ran), most recent first.

- The input is a COMBO of the models of those boxes that can do the node's op, asked again on each `INPUT_TYPES`
  call (ComfyUI's /object_info: at start and on Refresh) once CACHE_S has passed, LIST_TIMEOUT_S at most.
- Its default VAE follows a fixed rule (the box marks none): Wan 2.1, then Wan 2.2, then SeedVR2, each in the
  boxes' order; the upscaler is the box's own default, realesrgan-animevideov3.
- A family whose models take other fields has a node of its own (FlashVSR: `family` "flashvsr"), whose input lists
  that family's models only; the op's other nodes (Restore: SeedVR2's DiTs) list the rest.
- The nodes name `model` in `VALIDATE_INPUTS`, so ComfyUI skips its "Value not in list" check and asks
  `check_name` instead: a name any known box serves for the op passes, typed or listed; one that every box that
  answered is without is refused in the box's own words (its op's models). When the prompt's box cannot be asked,
  or its connection's URL is not known before it runs, the name passes and the connected box decides when the node
  runs. That leniency is the prompt's own: the box of the connection node ComfyUI validated last (it validates a
  connection before the nodes it feeds), so a box that was away once does not switch the check off for other
  connections, and a box that failed to answer is asked again after CACHE_S (at once when a name is not found).
- With no box reachable the list holds the names the box's README uses, still a COMBO whose typed names pass."""
import os
import threading
import time

from .connection import DEFAULT_URL, Connection
from .errors import VaeboxError

URL_VARIABLE = "COMFY_VAEBOX_URL"
TOKEN_VARIABLE = "COMFY_VAEBOX_TOKEN"
# ComfyUI asks for every node's inputs at once, on its event loop; a box that is away must not stall it.
LIST_TIMEOUT_S = 1.5
# A list is asked again after this: long enough for one /object_info or one prompt's validation, short enough
# that a model put on a box shows on the next Refresh.
CACHE_S = 10.0
# A box that did not answer is asked again after this, not CACHE_S: once it is back (a restart), names are checked
# against it again at the next validation rather than let through for CACHE_S.
FAILED_RETRY_S = 2.0
# Connection nodes' boxes remembered; the oldest is forgotten past this.
MAX_BOXES = 8
# The upscaler a box uses when a job names none (src/models/op.rs).
BOX_DEFAULT_UPSCALER = "realesrgan-animevideov3"
# The VAE a node starts with: the family of ComfyUI's most common video latents first (Wan 2.1's VAE also
# serves Wan 2.2 14B), then Wan 2.2 (the 5B), then SeedVR2 (restore's own VAE, rarely a graph's latent).
VAE_FAMILY_PREFERENCE = ("wan21", "wan22", "seedvr2")
# Restore models of these families take other fields than SeedVR2's, and have a node of their own (its display name).
OWN_NODES = {"flashvsr": "FlashVSR Restore (vaebox)"}
# With no box to ask: the names the box's README gives its files, so the COMBO is not empty (the tiny TAEHV
# decoders last: a preview, never the default); by op, or by family for an input of one family.
NAMES_WITHOUT_BOX = {
    "vae_decode": ["wan_2.1_vae", "wan2.2_vae", "ema_vae_fp16", "taew2_1", "taew2_2"],
    "vae_encode": ["wan_2.1_vae", "wan2.2_vae", "ema_vae_fp16", "taew2_1", "taew2_2"],
    "upscale": [BOX_DEFAULT_UPSCALER, "realesrgan-x4plus"],
    "restore": ["seedvr2_ema_3b_fp16", "seedvr2_ema_7b_fp16"],
    "flashvsr": ["FlashVSR-v1.1", "FlashVSR"],
    "wan21": ["wan_2.1_vae"],
}

_lock = threading.Lock()
_connected = {}  # url -> token, in the order connection nodes named them (dicts keep it)
_answers = {}  # url -> (monotonic time asked, its models or None when it did not answer)
_last_listed = {}  # url -> its models at its last answer: the list still shows them while it is away
# The box of the connection node validated last: its URL, UNADDRESSED (a URL fed by a link, unknown until the node
# runs), or None before any. The nodes it feeds are validated right after it.
UNADDRESSED = object()
_prompt_box = [None]


def env_box():
    return os.environ.get(URL_VARIABLE) or DEFAULT_URL, os.environ.get(TOKEN_VARIABLE, "")


def remember_box(url, token=""):
    """A connection node named this box: its models join the lists, most recent first. None: a URL fed by a link,
    which makes name checks lenient (that box cannot be asked before the node runs)."""
    if url is None:
        with _lock:
            _prompt_box[0] = UNADDRESSED
        return
    try:
        url = Connection(url, token).url
    except ValueError:
        return
    with _lock:
        _prompt_box[0] = url
        _connected.pop(url, None)
        _connected[url] = token or os.environ.get(TOKEN_VARIABLE, "")
        while len(_connected) > MAX_BOXES:
            _connected.pop(next(iter(_connected)))


def known_boxes():
    """(url, token) of each box this ComfyUI knows: connection nodes' most recent first, then $COMFY_VAEBOX_URL."""
    with _lock:
        boxes = list(reversed(_connected.items()))
    url, token = env_box()
    try:
        url = Connection(url, token).url
    except ValueError:
        return boxes
    return boxes + ([(url, token)] if url not in dict(boxes) else [])


def _ask(url, token):
    try:
        models = Connection(url, token).models(timeout=LIST_TIMEOUT_S)
    except (VaeboxError, ValueError, KeyError, TypeError):
        models = None
    with _lock:
        _answers[url] = (time.monotonic(), models)
        if models is not None:
            _last_listed[url] = models


def answers(boxes, fresh=False):
    """{url: models or None} for `boxes`, asking those whose answer is older than CACHE_S (a failure: FAILED_RETRY_S;
    all with `fresh`) side by side, so that boxes away cost LIST_TIMEOUT_S together, not each."""
    now = time.monotonic()

    def stale(url):
        if fresh or url not in _answers:
            return True
        asked, models = _answers[url]
        return now - asked >= (CACHE_S if models is not None else FAILED_RETRY_S)

    with _lock:
        to_ask = [(u, t) for u, t in boxes if stale(u)]
    askers = [threading.Thread(target=_ask, args=box, daemon=True) for box in to_ask]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(LIST_TIMEOUT_S + 1.0)
    with _lock:
        return {u: _answers.get(u, (0.0, None))[1] for u, _ in boxes}


def of_family(model, family):
    """Whether an input for `family` lists `model`; None: an op's general input, which leaves out the families
    with a node of their own."""
    return model.get("family") == family if family else model.get("family") not in OWN_NODES


def able(models, op, family=None):
    """The models of one box's list that can do `op` (and are of `family`, see of_family), their files present,
    in the box's order."""
    return [m for m in models if op in m.get("ops", []) and m.get("present", True) and of_family(m, family)]


def default_name(entries, op, preferred):
    """The input's first value: `preferred` when listed, a VAE by VAE_FAMILY_PREFERENCE, else the first."""
    names = [m["name"] for m in entries]
    if preferred in names:
        return preferred
    if op in ("vae_decode", "vae_encode"):
        for family in VAE_FAMILY_PREFERENCE:
            for model in entries:
                if model.get("family") == family:
                    return model["name"]
    return names[0]


def listed_models(op, family=None, preferred=""):
    """The models that can do `op` (of `family`) on the boxes this ComfyUI knows, each name once, most recent box
    first; with none, the README's names."""
    boxes = known_boxes()
    listed = answers(boxes)
    entries, seen = [], set()
    for url, _ in boxes:
        with _lock:
            models = listed.get(url) or _last_listed.get(url) or []
        for model in able(models, op, family):
            if model["name"] not in seen:
                seen.add(model["name"])
                entries.append(model)
    return entries or [{"name": name} for name in NAMES_WITHOUT_BOX.get(family or op, [preferred or "model"])]


def model_input(op, preferred="", family=None):
    """A ComfyUI COMBO spec for a model that can do `op` (of `family`), listed from the boxes this ComfyUI knows."""
    entries = listed_models(op, family, preferred)
    tooltip = "a model of the connected box that can do this; any name the box serves is taken (GET /v1/models)"
    return ([m["name"] for m in entries], {"default": default_name(entries, op, preferred), "tooltip": tooltip})


def refusal(name, op, models, family=None):
    """What the box itself answers a job naming `name` for `op` (src/queue/request.rs find_model); a model that
    can do it but is for another node (see of_family), said so."""
    can = [m["name"] for m in able(models, op, family)]
    named = [m for m in models if m["name"] == name]
    if named and op in named[0].get("ops", []) and not of_family(named[0], family):
        if family is None:
            own = named[0].get("family")
            return f"model `{name}` is a {own} model: it takes other inputs, in the {OWN_NODES[own]} node"
        which = f"this box's: {', '.join(can)}" if can else "this box has none"
        return f"model `{name}` is not a {family} model ({which})"
    if named:
        which = f"models that can: {', '.join(can)}" if can else "no model on this box can"
        return f"model `{name}` cannot do `{op}`; {which}"
    if can:
        return f"unknown model `{name}`; for `{op}` this box has {', '.join(can)}"
    return f"unknown model `{name}`; no model on this box can do `{op}`"


def check_name(op, model, family=None):
    """`VALIDATE_INPUTS`' answer for a node's `model` (of `family`, see of_family): True, or why ComfyUI should
    refuse the prompt."""
    name = model.strip() if isinstance(model, str) else model
    if name is None:
        return True  # fed by a link: its value is known only when the node runs
    if not name:
        return f"name a model that can do {op} (GET /v1/models on the box lists them)"
    with _lock:
        prompt_box = _prompt_box[0]
    if prompt_box is UNADDRESSED:
        return True
    boxes = known_boxes()
    # The boxes this node may be connected to: the prompt's, else (no connection node validated) every known one.
    candidates = [prompt_box] if prompt_box is not None else [url for url, _ in boxes]
    # Asked afresh when not found in a cached list: a model just put on a box is not refused for CACHE_S.
    for fresh in (False, True):
        listed = answers(boxes, fresh)
        if any(listed.get(url) is None for url in candidates):
            return True  # the node's box cannot be asked: it decides when the node runs
        if any(models is not None and name in [m["name"] for m in able(models, op, family)] for models in listed.values()):
            return True
    reasons = [f"{url}: {refusal(name, op, models, family)}" for url, models in listed.items() if models is not None]
    return "vaebox: " + "; ".join(reasons) + ". Hint: pick a model from the list, or check the connection node's url"
