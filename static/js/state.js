// What the page holds: the jobs, their order, the filters, the event streams and the cards.

export const PAGE = 50;
export const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

export const state = {
  models: [],
  files: [],            // the chosen files: one job each, with the form's settings
  xhr: null,
  jobs: new Map(),      // id -> Job
  order: [],            // ids, newest first
  nextOffset: null,
  loaded: PAGE,         // how many jobs to fetch on each poll (grows with "Load more")
  filter: "",
  opFilter: "",         // the op select (filterOps): the page hides cards itself, the list asked for is the same
  streams: new Map(),   // id -> EventSource
  streamFailures: new Map(),
  openDetails: new Set(), // "<id>:<section>" of <details> the user opened
  cards: new Map(),     // id -> { el, sigs, nodes } (per-section signatures and DOM nodes)
  pollTimer: null,
  workerCount: 0,       // workers /healthz names (none: no start is promised, see placeText)
};
