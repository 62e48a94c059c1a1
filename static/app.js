// Small behaviours of the session page. Loaded after htmx and before its ws extension.

// Reconnect with replay: every (re)connection asks for the events after the last one this
// page has shown, so a dropped connection misses nothing and shows nothing twice.
htmx.createWebSocket = function (url) {
  var marker = document.getElementById("last-seq");
  var after = marker ? marker.getAttribute("data-seq") || "0" : "0";
  var sep = url.indexOf("?") >= 0 ? "&" : "?";
  return new WebSocket(url + sep + "after=" + encodeURIComponent(after));
};

function setConnection(text, cls) {
  var el = document.getElementById("connection");
  if (el) { el.textContent = text; el.className = "small " + cls; }
}

document.addEventListener("htmx:wsOpen", function () { setConnection("live", "ok"); });
document.addEventListener("htmx:wsClose", function () { setConnection("disconnected: reconnecting…", "error"); });

// A suggested question fills the composer; the person edits and sends it.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-suggestion]");
  if (!button) return;
  var text = document.getElementById("composer-text");
  if (text) { text.value = button.getAttribute("data-suggestion"); text.focus(); }
});

// Keep the newest events in view when the reader is already at the bottom of the trace.
document.addEventListener("htmx:wsBeforeMessage", function () {
  var trace = document.getElementById("trace");
  if (trace) trace.dataset.stick = String(trace.scrollHeight - trace.scrollTop - trace.clientHeight < 40);
});
document.addEventListener("htmx:wsAfterMessage", function () {
  var trace = document.getElementById("trace");
  if (trace && trace.dataset.stick === "true") trace.scrollTop = trace.scrollHeight;
});

// Actions that cannot be undone ask first: an element with data-confirm sends over the
// websocket only once the person agrees (cancelling htmx:wsConfigSend sends nothing).
document.addEventListener("htmx:wsConfigSend", function (event) {
  var form = event.target.closest ? event.target.closest("[data-confirm]") : null;
  if (form && !window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
});
