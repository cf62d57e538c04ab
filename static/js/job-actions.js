// A card's buttons: run the whole clip, pause and resume, cancel (keeping the finished frames or not), delete.

import { $, h } from "./dom.js";
import { shortId } from "./format.js";
import { api } from "./api.js";
import { errorNode, toast } from "./notices.js";
import { state } from "./state.js";

// What the job list does with an answer: show a job as it is now, add a new one, drop a deleted one. The list
// draws the cards these buttons sit on, so it hands its functions in (main.js wires them) instead of being
// imported here: cards → buttons → list → cards would be an import circle.
const list = { show: () => {}, add: () => {}, drop: () => {} };
export function connectActionsToList({ show, add, drop }) { Object.assign(list, { show, add, drop }); }

// The whole clip of a job over part of its input, made by the server from the input that job kept, with
// its settings: nothing is sent again, so it works after a reload and for tries sent by curl or a script.
export async function runWhole(job, btn) {
  btn.disabled = true;
  try {
    const whole = await api("POST", `/v1/jobs/${encodeURIComponent(job.id)}/whole`);
    if (whole && whole.id) {
      list.add(whole);
      const link = h("a", { href: `#job-${whole.id}`, text: shortId(whole.id) });
      if (whole.httpStatus === 200) toast([`The whole clip was asked for before: `, link, ` is ${whole.status}`]);
      else toast(["Queued the whole clip as ", link]);
    }
  } catch (e) {
    toast(errorNode(e), true);
  }
  btn.disabled = false;
}

// Pause, resume, cancel, or stop keeping the finished frames: the box answers with the job as it is now.
async function changeJob(id, btn, action, said) {
  btn.disabled = true;
  try {
    const job = await api("POST", `/v1/jobs/${encodeURIComponent(id)}/${action}`);
    if (job && job.id) list.show(job);
    toast(said(shortId(id)));
  } catch (e) {
    toast(errorNode(e), true);
    btn.disabled = false;
  }
}

export const cancelJob = (id, btn) => changeJob(id, btn, "cancel", (job) => `Cancel requested for ${job}.`);
export const stopAndKeep = (id, btn) => changeJob(id, btn, "cancel?keep=true", (job) => `Stopping ${job}; the frames it finished are kept.`);
export const pauseJob = (id, btn) => changeJob(id, btn, "pause", (job) => `Pause requested for ${job}.`);
export const resumeJob = (id, btn) => changeJob(id, btn, "resume", (job) => `Resumed ${job}.`);

export async function deleteJob(id, btn) {
  const j = state.jobs.get(id);
  const name = j && j.input ? j.input.file_name : shortId(id);
  if (!window.confirm(`Delete job ${shortId(id)} (${name}) and its output?`)) return;
  btn.disabled = true;
  try {
    await api("DELETE", `/v1/jobs/${encodeURIComponent(id)}`);
    list.drop(id);
    toast(`Deleted ${shortId(id)}.`);
    $("jobs-heading").focus();
  } catch (e) {
    if (e.status === 404) { list.drop(id); return; }
    toast(errorNode(e), true);
    btn.disabled = false;
  }
}
