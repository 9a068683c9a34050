// agentledger's viewer: the little script of its own a page loads (no framework, no inline
// script). It shows each time in the reader's own time zone (the server writes them in UTC),
// and keeps a page live: the server tells it, as server-sent events, which conversations and
// runs changed, and whether rows were deleted; the page fetches again the parts of it that show
// them (fragments the server renders with the same templates, every value escaped there) and
// swaps them in, keeping open what the reader opened; a page of something forgotten loads
// again, to be told so. No markup is ever built here from data.
"use strict";

function localTimes(root) {
  for (const element of root.querySelectorAll("time[datetime]")) {
    const moment = new Date(element.getAttribute("datetime"));
    if (Number.isNaN(moment.getTime())) continue;
    element.title = element.textContent + " UTC";
    element.textContent = moment.toLocaleString();
  }
}

// --- swapping a part of the page for its fresh copy ----------------------------------------------

// What a folded element is known by across copies of the page: a run by its id, anything else
// inside a step by the step and its place there (a committed step does not change).
function keyOf(details) {
  if (details.dataset.run) return "run " + details.dataset.run;
  const step = details.closest("li.step");
  if (step === null) return null;
  const own = Array.from(step.querySelectorAll("details")).filter((d) => d.closest("li.step") === step);
  return step.id + " " + own.indexOf(details);
}

function foldedIn(root) {
  const all = Array.from(root.querySelectorAll("details"));
  return root.matches("details") ? [root, ...all] : all;
}

function replace(old, fresh) {
  const opened = new Set(foldedIn(old).filter((d) => d.open).map(keyOf));
  const copy = document.importNode(fresh, true);
  for (const details of foldedIn(copy)) {
    const key = keyOf(details);
    if (key !== null) details.open = opened.has(key);
  }
  localTimes(copy);
  old.replaceWith(copy);
  return copy;
}

async function fragment(address) {
  const response = await fetch(address, { credentials: "same-origin", headers: { accept: "text/html" } });
  if (!response.ok) return null;
  const parsed = new DOMParser().parseFromString(await response.text(), "text/html");
  return parsed.querySelector("div.fragment");
}

// --- what a change touches ---------------------------------------------------------------------

async function refreshListing(region) {
  const fresh = await fragment(region.dataset.live);
  const listing = fresh && fresh.querySelector("div.listing");
  if (listing) replace(region, listing);
}

async function refreshTurns(region) {
  const fresh = await fragment(region.dataset.live);
  if (fresh === null) return;
  for (const turn of fresh.querySelectorAll("section.turn")) {
    const shown = Array.from(region.querySelectorAll("section.turn")).find((s) => s.dataset.turn === turn.dataset.turn);
    if (shown) {
      replace(shown, turn);
    } else {
      for (const empty of region.querySelectorAll(":scope > .empty")) empty.remove();
      const copy = document.importNode(turn, true);
      localTimes(copy);
      region.append(copy);
    }
  }
}

async function refreshRun(details) {
  const fresh = await fragment("/live/r/" + encodeURIComponent(details.dataset.run));
  const run = fresh && fresh.querySelector("details.run");
  if (run && details.isConnected) replace(details, run);
}

// Whether the page's own conversation or run is gone (forgotten): its fragment is not found.
async function gone(address) {
  const response = await fetch(address, { method: "HEAD", credentials: "same-origin" });
  return response.status === 404;
}

async function refreshTree(tree) {
  const fresh = await fragment(tree.dataset.live);
  const copy = fresh && fresh.querySelector("ul.tree");
  if (copy) replace(tree, copy);
}

// ``changed``: the ids an event names (and whether rows were deleted), or null when the page
// must read everything again.
async function refresh(changed) {
  const conversations = new Set(changed ? changed.conversations : []);
  const runs = new Set(changed ? changed.runs : []);
  const deleted = changed !== null && changed.deleted === true;
  const touches = (id) => changed === null || runs.has(id);
  if (deleted) {
    for (const region of document.querySelectorAll("div.turns[data-live], ul.tree[data-live]")) {
      if (await gone(region.dataset.live)) {
        window.location.reload(); // the page of what was forgotten: the viewer says so
        return;
      }
    }
  }
  for (const region of document.querySelectorAll("div.listing[data-live]")) {
    if (changed === null || conversations.size > 0 || deleted) await refreshListing(region);
  }
  for (const region of document.querySelectorAll("div.turns[data-live]")) {
    if (changed === null || conversations.has(region.dataset.conversation)) await refreshTurns(region);
  }
  const outermost = Array.from(document.querySelectorAll("details.run[data-run]")).filter(
    (d) => touches(d.dataset.run) && !(d.parentElement.closest("details.run") && touches(d.parentElement.closest("details.run").dataset.run)),
  );
  for (const details of outermost) await refreshRun(details);
  for (const tree of document.querySelectorAll("ul.tree[data-live]")) {
    if (tree.dataset.runs.split(" ").some((id) => id && touches(id))) await refreshTree(tree);
  }
  document.body.dataset.updated = String(Number(document.body.dataset.updated || 0) + 1);
}

function watch() {
  const stamp = document.body.dataset.stamp;
  if (stamp === undefined || typeof EventSource === "undefined") return;
  if (document.querySelector("[data-live], details.run[data-run]") === null) return; // nothing to follow
  // A browser keeps few connections to one host (six over HTTP/1.1), and each stream holds
  // one: a page out of sight closes its stream, and opens it again from the last stamp it was
  // told when it is shown, so that what changed meanwhile comes then.
  let since = stamp;
  let source = null;
  let queue = Promise.resolve();
  const later = (changed) => {
    queue = queue.then(() => refresh(changed)).catch(() => undefined);
  };
  const told = (event) => {
    if (event.lastEventId) since = event.lastEventId;
  };
  const open = () => {
    if (source !== null) return;
    source = new EventSource("/events?since=" + encodeURIComponent(since));
    source.addEventListener("changes", (event) => { told(event); later(JSON.parse(event.data)); });
    source.addEventListener("reload", (event) => { told(event); later(null); });
    source.addEventListener("open", () => { document.body.dataset.live = "yes"; });
  };
  const close = () => {
    if (source === null) return;
    source.close();
    source = null;
    document.body.dataset.live = "paused";
  };
  document.addEventListener("visibilitychange", () => (document.hidden ? close() : open()));
  if (!document.hidden) open();
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  watch();
});
