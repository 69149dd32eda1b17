// Live refresh for Locking-Center's pages. Every few seconds it asks the
// server for the current page (header X-Live: 1 returns only the live
// parts) and swaps each element marked data-live by its id. The URL, and
// so the filter and the page number, stay as they are. Without JavaScript
// the pages work the same, minus the refresh.
(function () {
  "use strict";
  var every = 2000;
  var status = document.getElementById("live-status");
  var timer = null;
  var busy = false;

  function show(state, text) {
    if (!status) return;
    status.className = "live-status live-" + state;
    status.textContent = text;
  }

  function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    fetch(location.pathname + location.search, {
      headers: { "X-Live": "1" },
      credentials: "same-origin",
      cache: "no-store"
    })
      .then(function (resp) {
        // A key page answers 404 once its key is released: still swap.
        if (!resp.ok && resp.status !== 404) throw new Error("HTTP " + resp.status);
        return resp.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live][id]").forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          if (fresh) el.replaceWith(fresh);
        });
        show("ok", "Live · " + new Date().toLocaleTimeString());
      })
      .catch(function () {
        show("down", "Offline · retrying");
      })
      .finally(function () {
        busy = false;
      });
  }

  function start() {
    if (timer === null) timer = setInterval(refresh, every);
  }
  function stop() {
    if (timer !== null) clearInterval(timer);
    timer = null;
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      stop();
    } else {
      refresh();
      start();
    }
  });
  show("ok", "Live");
  start();
})();
