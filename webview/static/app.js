// Live updates: the server sends an event "changed" on its Server-Sent Events stream after
// the cluster changed; the page fetches its content again (?fragment=1) and swaps it in.
(function () {
  "use strict";
  var main = document.getElementById("content");
  var live = document.getElementById("live");
  if (!main || !window.EventSource) {
    if (live) { live.textContent = "no live updates"; }
    return;
  }
  var busy = false, again = false;
  function setLive(on, text) {
    if (!live) { return; }
    live.className = "live " + (on ? "on" : "off");
    live.textContent = text;
  }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    fetch(url.toString(), { headers: { "Accept": "text/html" }, credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        main.innerHTML = html;
        var n = parseInt(document.body.dataset.updates || "0", 10) + 1;
        document.body.dataset.updates = String(n);
      })
      .catch(function () { setLive(false, "update failed"); })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  var connected = false;
  var es = new EventSource(document.body.dataset.events);
  es.addEventListener("hello", function () {
    // A reconnect may have missed changes: fetch once more.
    if (connected) { refresh(); }
    connected = true;
    setLive(true, "live");
  });
  es.addEventListener("changed", refresh);
  es.onerror = function () { setLive(false, "reconnecting"); };
})();
