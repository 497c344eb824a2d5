/* The chat page's start: the live timeline on the page's config, "Your timezone", the
 * assistant switcher, and on a phone the header's "More" menu. A file of its own, not
 * inline, so the page's Content-Security-Policy runs scripts from our files only
 * (qorven/runtime/security_headers.py). */
(function () {
  "use strict";
  var config = JSON.parse(document.getElementById("chat-config").textContent);
  var chat = new QorvenChat(document.getElementById("chat"), config);
  chat.start();
  if (window.QorvenTimezone && config.timezone) new QorvenTimezone(chat);
  var switcher = document.querySelector("[data-switcher]");
  if (switcher) switcher.addEventListener("change", function () { location.href = switcher.value; });

  // "More" shows the header's actions on a phone (on a wider screen they are all in the
  // header and the button is not shown). A disclosure: Escape or a tap elsewhere closes
  // it, and so does an action, except the notification toggle, whose state it shows.
  var more = document.querySelector("[data-more]");
  var menu = document.querySelector("[data-menu]");
  if (!more || !menu) return;
  var setOpen = function (open, refocus) {
    more.setAttribute("aria-expanded", open ? "true" : "false");
    if (open) menu.setAttribute("data-open", ""); else menu.removeAttribute("data-open");
    if (!open && refocus) more.focus();
  };
  var isOpen = function () { return menu.hasAttribute("data-open"); };
  more.addEventListener("click", function () { setOpen(!isOpen(), false); });
  menu.addEventListener("click", function (e) {
    var action = e.target.closest("button, a");
    if (action && !action.hasAttribute("data-notify")) setOpen(false, false);
  });
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape" && isOpen()) { e.preventDefault(); setOpen(false, true); }
  });
  document.addEventListener("click", function (e) {
    if (isOpen() && !menu.contains(e.target) && !more.contains(e.target)) setOpen(false, false);
  });
  // A dialog opened from the menu gives the focus back to its opener as it closes, which
  // the closed menu hides: it goes to "More" instead of nowhere.
  document.querySelectorAll("dialog").forEach(function (dialog) {
    dialog.addEventListener("close", function () {
      var at = document.activeElement;
      if ((!at || at === document.body || menu.contains(at)) && more.offsetParent !== null) more.focus();
    });
  });
})();
