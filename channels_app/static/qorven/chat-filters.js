/* The row of channel filters where it is wider than the screen (a phone, where it has no
 * scrollbar): marks each edge with more filters beyond it, which chat.css fades out, so
 * the person sees there is more that way; the marks follow the row as it scrolls and as
 * it is resized, and a filter given the focus scrolls clear of the fades. Where the row
 * fits, nothing is marked and nothing fades. */
(function () {
  "use strict";
  var row = document.querySelector(".filters");
  if (!row) return;
  var queued = false;
  var mark = function (name, on) {
    if (on !== row.hasAttribute(name)) { if (on) row.setAttribute(name, ""); else row.removeAttribute(name); }
  };
  var update = function () {
    queued = false;
    var end = row.scrollWidth - row.clientWidth;
    // A pixel of slack: a zoomed page scrolls to fractions and may stop short of the end.
    mark("data-more-left", end > 1 && row.scrollLeft > 1);
    mark("data-more-right", end > 1 && row.scrollLeft < end - 1);
  };
  // Once a frame at most, however many scroll events a swipe fires.
  var later = function () {
    if (!queued) { queued = true; requestAnimationFrame(update); }
  };
  row.addEventListener("scroll", later, { passive: true });
  // A filter reached by Tab comes wholly into view, clear of the fades (the row's
  // scroll-padding): the browser left one half off the screen. Smoothly unless the
  // system asks for reduced motion (chat.css).
  row.addEventListener("focusin", function (e) {
    if (e.target !== row) e.target.scrollIntoView({ block: "nearest", inline: "nearest" });
  });
  if (window.ResizeObserver) new ResizeObserver(later).observe(row);
  else window.addEventListener("resize", later);
  update();
})();
