// The lineage tree opens with the leader in view: its scroll box is scrolled so that the
// leader's node sits in the middle (a wide tree no longer hides the leader off to the right).
(function () {
  var box = document.getElementById("lineage-scroll");
  var leader = box && box.querySelector(".node.is-leader rect");
  if (!box || !leader) return;
  var b = box.getBoundingClientRect(), r = leader.getBoundingClientRect();
  box.scrollLeft += (r.left + r.width / 2) - (b.left + b.width / 2);
  box.scrollTop += (r.top + r.height / 2) - (b.top + b.height / 2);
})();
