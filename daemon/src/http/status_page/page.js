// The status page's only script: keeps <main id="live"> current with the
// server-rendered fragments the daemon sends as server-sent events. The
// HTML is rendered (and escaped) by the daemon; nothing here builds markup.
(function () {
  var live = document.getElementById("live");
  var conn = document.getElementById("conn");
  var url = live && live.getAttribute("data-events");
  function say(text, cls) {
    if (conn) { conn.textContent = text; conn.className = "conn " + cls; }
  }
  if (!url || !window.EventSource) { say("static", "off"); return; }
  var source = new EventSource(url);
  source.addEventListener("update", function (e) {
    live.innerHTML = e.data;
    live.setAttribute("data-updates", String(Number(live.getAttribute("data-updates") || 0) + 1));
    say("live", "on");
  });
  source.onopen = function () { say("live", "on"); };
  source.onerror = function () { say("reconnecting", "off"); };
})();
