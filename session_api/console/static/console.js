// Follows a session page live: the session's event stream (the current view, then a
// `commit` per commit, and `preview`s; EventSource reconnects with Last-Event-ID, so no
// commit is missed or seen twice), and on each change the page's live part is fetched
// again from the server, which renders it from the store. Nothing is computed here.
// A connection the server refused (429: too many streams open for this token, or an
// error answer) is one EventSource gives up on for good: the page then makes a new
// one after a pause (2 s, doubling to 30 s), which starts with a fresh view.
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

  const FIRST_PAUSE = 2000;
  let pause = FIRST_PAUSE;

  function follow() {
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
    source.onopen = function () {
      pause = FIRST_PAUSE;
      say("live · seq " + seq, "live");
    };
    source.onerror = function () {
      say("connection lost: reconnecting (the page shows seq " + seq + ")", "lost");
      if (source.readyState !== EventSource.CLOSED) return;  // EventSource retries itself
      source.close();  // refused: it will not try again, so a new one will
      setTimeout(follow, pause);
      pause = Math.min(pause * 2, 30000);
    };
  }

  follow();
})();
