// The MCP page (templates/mcp.html): the session's token is fetched only when the person asks
// for it, from the JSON API with this page's own credentials (the sign-in cookie), and shown
// as text (never as HTML).
(function () {
  var box = document.getElementById("mcp-access");
  var show = document.getElementById("show-token");
  var copy = document.getElementById("copy-command");
  var status = document.getElementById("mcp-status");
  if (!box || !show) return;
  show.addEventListener("click", function () {
    show.disabled = true;
    status.textContent = "";
    fetch(box.getAttribute("data-api"), {credentials: "same-origin", cache: "no-store",
                                         headers: {"Accept": "application/json"}})
      .then(function (r) {
        if (!r.ok) throw new Error("the server answered " + r.status);
        return r.json();
      })
      .then(function (data) {
        document.getElementById("mcp-token").textContent = data.token;
        document.getElementById("mcp-command").textContent = data.claude_code;
        document.getElementById("mcp-url").textContent = data.url;
        show.hidden = true;
        if (copy && navigator.clipboard) copy.hidden = false;
      })
      .catch(function (err) {
        show.disabled = false;
        status.textContent = "Could not fetch the token: " + err.message;
      });
  });
  if (copy) copy.addEventListener("click", function () {
    navigator.clipboard.writeText(document.getElementById("mcp-command").textContent).then(function () {
      status.textContent = "Copied.";
    }, function () { status.textContent = "Copy failed: select the command instead."; });
  });
})();
