// agentledger's viewer: the little script of its own a page loads (no framework, no inline
// script). It shows each time in the reader's own time zone; the server writes them in UTC.
"use strict";

function localTimes(root) {
  for (const element of root.querySelectorAll("time[datetime]")) {
    const moment = new Date(element.getAttribute("datetime"));
    if (Number.isNaN(moment.getTime())) continue;
    element.title = element.textContent + " UTC";
    element.textContent = moment.toLocaleString();
  }
}

document.addEventListener("DOMContentLoaded", () => localTimes(document));
