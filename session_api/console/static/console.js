// Follows a session page live: the session's event stream (the current view, then a
// `commit` per commit, and `preview`s; EventSource reconnects with Last-Event-ID, so no
// commit is missed or seen twice), and on each change the page's live part is fetched
// again from the server, which renders it from the store. Nothing is computed here.
"use strict";

(function () {
  const live = document.getElementById("live");
  const state = document.getElementById("stream-state");
  if (!live || !state) return;
  const session = live.dataset.session;
  let seq = Number(live.dataset.seq);
  let fetching = false;
  let again = false;

  function say(text, cls) {
    state.textContent = text;
    state.className = "stream-state " + cls;
  }

  async function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    try {
      const url = "/console/sessions/" + encodeURIComponent(session) + "/live" + location.search;
      const response = await fetch(url, { credentials: "same-origin" });
      if (response.ok) live.innerHTML = await response.text();
    } finally {
      fetching = false;
      if (again) { again = false; refresh(); }
    }
  }

  const source = new EventSource("/v1/sessions/" + encodeURIComponent(session) + "/events?entries=0");
  source.addEventListener("view", function (event) {
    const view = JSON.parse(event.data);
    if (view.seq !== seq) { seq = view.seq; refresh(); }
    say("live · seq " + seq, "live");
  });
  source.addEventListener("commit", function (event) {
    const id = Number(event.lastEventId);
    if (id > seq) seq = id;
    say("live · seq " + seq, "live");
    refresh();
  });
  source.addEventListener("preview", function () { refresh(); });
  source.onopen = function () { say("live · seq " + seq, "live"); };
  source.onerror = function () { say("connection lost: reconnecting (the page shows seq " + seq + ")", "lost"); };
})();
