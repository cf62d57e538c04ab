// A card's thumbnail of its input or output.

import { h } from "./dom.js";
import { authHeaders, withToken } from "./access-token.js";
import { TERMINAL } from "./state.js";

// The server's still is of the input until the job succeeded, then of the output (none of an output
// that was not kept), at one URL. A page keeps an image it has shown by its URL for as long as it is
// open, whatever the cache headers say, so a card that showed the input's still under that URL would
// go on showing it. So the still of a job not yet done is fetched and shown as a data: URL of its own
// (the page's Content-Security-Policy allows data: images, not blob:), and the URL itself is only shown
// for a job that is done (whose still no longer changes).
export function thumbnailOf(job) {
  const showsOutput = job.status === "succeeded" && job.output && job.output.kept !== false && !!job.output.media;
  if (!showsOutput && !(job.input && job.input.media)) return null;
  const url = `/v1/jobs/${job.id}/thumbnail`;
  const img = h("img", { class: "thumb", alt: "", "data-side": showsOutput ? "output" : "input" });
  img.addEventListener("error", () => img.remove());
  if (TERMINAL.has(job.status)) {
    img.loading = "lazy";
    img.src = withToken(url);
  } else {
    loadStillOnce(img, url);
  }
  return img;
}

function dataUrlOf(blob) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.addEventListener("load", () => resolve(reader.result));
    reader.addEventListener("error", () => reject(reader.error));
    reader.readAsDataURL(blob);
  });
}

async function loadStillOnce(img, url) {
  try {
    const res = await fetch(url, { headers: authHeaders({}), cache: "no-store" });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    img.src = await dataUrlOf(await res.blob());
  } catch (_) {
    img.remove();
  }
}
