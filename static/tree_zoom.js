// Zoom and pan for the campaign tree (templates/fragments/campaign_live.html): the buttons
// (-, +, fit, 100%), ctrl/cmd + wheel about the pointer, and a drag on the background; its box
// scrolls. The SVG keeps its viewBox, so changing its size scales it. It opens at its own size, or
// fitted to the page when that costs at most a quarter of it. The page's live fragment
// is swapped every few seconds, so the zoom and the scroll position are kept here and put back.
(function () {
  var kept = {};  // box id -> {scale, left, top}
  function svgOf(box) { return box && box.querySelector("svg[data-width]"); }
  function scaleOf(box) { return (kept[box.id] && kept[box.id].scale) || 1; }
  function apply(box, scale) {
    var svg = svgOf(box);
    if (!svg) return;
    scale = Math.max(0.15, Math.min(4, scale));
    svg.setAttribute("width", Math.round(Number(svg.dataset.width) * scale));
    svg.setAttribute("height", Math.round(Number(svg.dataset.height) * scale));
    (kept[box.id] = kept[box.id] || {}).scale = scale;
    var level = document.querySelector('[data-zoom-for="' + box.id + '"] .zoom-level');
    if (level) level.textContent = Math.round(scale * 100) + "%";
  }
  function fit(box) {
    var svg = svgOf(box);
    return svg ? Math.min(1, (box.clientWidth - 4) / Number(svg.dataset.width)) : 1;
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-zoom]");
    var bar = button && button.closest("[data-zoom-for]");
    var box = bar && document.getElementById(bar.getAttribute("data-zoom-for"));
    if (!box) return;
    var how = button.getAttribute("data-zoom");
    apply(box, how === "in" ? scaleOf(box) * 1.25 : how === "out" ? scaleOf(box) / 1.25 : how === "fit" ? fit(box) : 1);
  });
  document.addEventListener("wheel", function (event) {
    var box = event.target.closest && event.target.closest(".zoom-box");
    if (!box || !(event.ctrlKey || event.metaKey)) return;
    event.preventDefault();
    var r = box.getBoundingClientRect(), x = event.clientX - r.left, y = event.clientY - r.top;
    var before = scaleOf(box);
    apply(box, before * (event.deltaY < 0 ? 1.1 : 1 / 1.1));
    var k = scaleOf(box) / before;
    box.scrollLeft = (box.scrollLeft + x) * k - x;
    box.scrollTop = (box.scrollTop + y) * k - y;
  }, { passive: false });
  var drag = null;
  document.addEventListener("pointerdown", function (event) {
    var box = event.target.closest && event.target.closest(".zoom-box");
    if (!box || event.button !== 0 || event.target.closest("a")) return;  // a kernel opens; the background pans
    drag = { box: box, x: event.clientX, y: event.clientY, left: box.scrollLeft, top: box.scrollTop };
    box.classList.add("dragging");
  });
  document.addEventListener("pointermove", function (event) {
    if (!drag) return;
    drag.box.scrollLeft = drag.left - (event.clientX - drag.x);
    drag.box.scrollTop = drag.top - (event.clientY - drag.y);
  });
  document.addEventListener("pointerup", function () {
    if (drag) drag.box.classList.remove("dragging");
    drag = null;
  });
  document.addEventListener("htmx:beforeSwap", function () {
    document.querySelectorAll(".zoom-box").forEach(function (box) {
      var k = (kept[box.id] = kept[box.id] || { scale: 1 });
      k.left = box.scrollLeft;
      k.top = box.scrollTop;
    });
  });
  function restore() {
    document.querySelectorAll(".zoom-box").forEach(function (box) {
      var k = kept[box.id];
      // first drawn: its own size, or the page's width when that keeps the labels readable (>= 75%)
      apply(box, k ? k.scale : (fit(box) >= 0.75 ? fit(box) : 1));
      if (k) {
        box.scrollLeft = k.left || 0;
        box.scrollTop = k.top || 0;
      }
    });
  }
  document.addEventListener("htmx:afterSwap", restore);
  restore();
})();
