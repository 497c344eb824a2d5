/* The webchat frame: who the visitor is, then the shared chat timeline.
 * The host page passes its signed visitor token in the frame URL's fragment (never sent
 * to any server in a request line or a Referer); an anonymous visitor's token, issued on
 * their first message, is kept in this frame's localStorage — or, where the browser blocks
 * storage in frames of other sites, in memory for as long as the frame is open. */
(function (global) {
  "use strict";
  var config = JSON.parse(document.getElementById("chat-config").textContent);
  var storeKey = "qorven.webchat." + config.key;
  var fragment = new URLSearchParams(location.hash.slice(1));
  var signed = fragment.get("token") || "";
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  // A token goes into a header: one with other characters (a placeholder pasted as is)
  // could never be sent, so the visitor chats anonymously and the site's owner is told.
  if (/[^\x21-\x7e]/.test(signed)) {
    if (global.console) console.warn("Qorven webchat: data-token is not a signed token; chatting anonymously");
    signed = "";
  }
  var remembered = "";

  function anonymous() {
    try { return localStorage.getItem(storeKey) || remembered; } catch (e) { return remembered; }
  }
  function token() { return signed || anonymous(); }

  config.authHeaders = function () {
    var t = token();
    var headers = {};
    if (t) headers[config.visitorHeader] = t;
    return headers;
  };
  config.socketParams = function () {
    var t = token();
    return t ? { visitor: t } : null; // no socket until there is someone to follow
  };
  config.onSent = function (data) {
    if (data.visitor) {
      remembered = data.visitor;
      try { localStorage.setItem(storeKey, data.visitor); } catch (e) {}
    }
  };
  config.onRefused = function (data, where) {
    if (!signed) {
      // An anonymous token unused for too long (or one the server does not take at all, as
      // its socket found): forget it, the next message starts anew.
      if (where === "socket" || /expired/.test(data.error || "")) {
        remembered = "";
        try { localStorage.removeItem(storeKey); } catch (e) {}
        return "forgotten";
      }
      return undefined;
    }
    // The host page's token: retrying will not make it valid.
    return where === "socket" ? "blocked" : undefined;
  };
  var chat = new QorvenChat(document.getElementById("chat"), config);
  chat.start();
  window.addEventListener("message", function (e) {
    if (e.data === "qorven:open") chat.input.focus();
  });
})(window);
