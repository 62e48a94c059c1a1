// Forms with an agent choice (new session, fork) show only the chosen agent's fields, its
// whole description, and why it cannot start here when it cannot (then submitting is held).
(function () {
  document.querySelectorAll("select[data-agent-select]").forEach(function (select) {
    var form = select.form;
    var note = select.parentElement.querySelector(".agent-description");
    function update() {
      var item = form.querySelector('.agent-notes li[data-for="' + select.value + '"]');
      form.querySelectorAll("[data-agent]").forEach(function (el) {
        el.hidden = el.getAttribute("data-agent") !== select.value;
      });
      if (note) {
        var why = item ? item.getAttribute("data-unavailable") : null;
        note.textContent = item ? item.textContent.replace(/^[^:]*: /, "").replace(why || "", "").trim() : "";
        if (why) {
          var span = document.createElement("span");
          span.className = "error";
          span.textContent = " " + why;
          note.appendChild(span);
        }
      }
    }
    select.addEventListener("change", update);
    update();
  });
})();
