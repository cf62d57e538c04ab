"""ComfyUI's progress bar and its Cancel button, imported lazily: without ComfyUI (the tests, a script) the
nodes still run, with no bar and nothing to cancel them."""
import importlib

PROGRESS_STEPS = 1000


def comfy_module(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


class Progress:
    """A ComfyUI progress bar fed with a job's fraction done (0..1), and a line of text on the node."""

    def __init__(self):
        utils = comfy_module("comfy.utils")
        self.bar = utils.ProgressBar(PROGRESS_STEPS) if utils is not None and hasattr(utils, "ProgressBar") else None
        self.last = -1
        self.said = None

    def say(self, text):
        """Shows `text` under the node, as ComfyUI's own nodes show progress text; once per change."""
        if text == self.said:
            return
        self.said = text
        node_text(text)

    def update(self, fraction):
        if self.bar is None or fraction is None:
            return
        done = max(0, min(PROGRESS_STEPS, int(round(float(fraction) * PROGRESS_STEPS))))
        if done != self.last:
            self.last = done
            self.bar.update_absolute(done, PROGRESS_STEPS)


def node_text(text):
    """ComfyUI's progress text for the node running now; nothing outside ComfyUI or in one without it. `server`
    is ComfyUI's own module, imported only once ComfyUI says a node is running (elsewhere the name may be
    another package's)."""
    utils = comfy_module("comfy_execution.utils")
    context = getattr(utils, "get_executing_context", lambda: None)()
    if context is None:
        return
    server = getattr(comfy_module("server"), "PromptServer", None)
    send = getattr(getattr(server, "instance", None), "send_progress_text", None)
    if send is not None:
        send(text, context.node_id)


def interrupted():
    """Whether the user cancelled the running prompt."""
    management = comfy_module("comfy.model_management")
    check = getattr(management, "processing_interrupted", None)
    return bool(check()) if check is not None else False


def raise_interrupted():
    """Ends the node the way ComfyUI's own nodes do on Cancel (its exception, which it reports as an
    interruption, not an error); our own when ComfyUI's does not raise."""
    management = comfy_module("comfy.model_management")
    throw = getattr(management, "throw_exception_if_processing_interrupted", None)
    if throw is not None:
        throw()
    from .errors import VaeboxInterrupted

    raise VaeboxInterrupted("the prompt was cancelled; the box's job was cancelled too")
