/* The chat page's start: the live timeline on the page's config, and the assistant
 * switcher. A file of its own, not inline, so the page's Content-Security-Policy runs
 * scripts from our files only (qorven/runtime/security_headers.py). */
(function () {
  "use strict";
  var config = JSON.parse(document.getElementById("chat-config").textContent);
  new QorvenChat(document.getElementById("chat"), config).start();
  var switcher = document.querySelector("[data-switcher]");
  if (switcher) switcher.addEventListener("change", function () { location.href = switcher.value; });
})();
