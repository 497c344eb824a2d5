/* The webchat frame: who the visitor is, then the shared chat timeline.
 * The host page passes its signed visitor token in the frame URL's fragment (never sent
 * to any server in a request line or a Referer); an anonymous visitor's token, issued on
 * their first message, is kept in this frame's localStorage — or, where the browser blocks
 * storage in frames of other sites, in memory for as long as the frame is open.
 * A host page that can sign fresh tokens (the loader's data-token-url or
 * QorvenWebchat.refreshToken; `renew=1` in the fragment) is asked for one before the
 * current one expires, and again when the server refuses it: the visitor never has to
 * reload. The request goes to the parent page; only the parent's answer is taken. */
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
  var canRenew = fragment.get("renew") === "1";
  var RENEW_AHEAD = 60000; // ms before a signed token expires that a fresh one is asked for
  var RENEW_WAIT = 15000; // ms the parent page has to answer
  var renewing = null;
  var renewTimer = null;

  // A signed token is "<user_id>:<expires>:<signature>" (user ids may hold colons).
  function expiresAt(t) {
    var parts = t.split(":");
    var seconds = parts.length >= 3 ? parseInt(parts[parts.length - 2], 10) : NaN;
    return isFinite(seconds) ? seconds * 1000 : 0;
  }
  function userOf(t) {
    var parts = t.split(":");
    return parts.slice(0, -2).join(":");
  }

  // Ask the host page for a fresh signed token. Resolves to true once this frame holds
  // one (false: none came, or the same one). A token for another user reloads the frame:
  // the chat on screen is someone else's.
  function renewToken() {
    if (!canRenew || !signed) return Promise.resolve(false);
    if (renewing) return renewing;
    renewing = new Promise(function (resolve) {
      var timer = setTimeout(function () { done(""); }, RENEW_WAIT);
      function heard(e) {
        if (e.source !== global.parent || !e.data || e.data.type !== "qorven:token") return;
        done(typeof e.data.token === "string" ? e.data.token.trim() : "");
      }
      function done(t) {
        clearTimeout(timer);
        global.removeEventListener("message", heard);
        resolve(t);
      }
      global.addEventListener("message", heard);
      global.parent.postMessage({ type: "qorven:token-needed" }, "*"); // carries nothing secret
    }).then(function (fresh) {
      renewing = null;
      if (!fresh || fresh === signed || /[^\x21-\x7e]/.test(fresh)) return false;
      if (userOf(fresh) !== userOf(signed)) {
        location.hash = "token=" + encodeURIComponent(fresh) + "&renew=1";
        location.reload();
        return false;
      }
      signed = fresh;
      renewSoon();
      return true;
    });
    return renewing;
  }

  // Renew ahead of expiry (half the token's life when that is under two minutes). A
  // token already expired is renewed at once, before the socket would be refused.
  function renewSoon() {
    clearTimeout(renewTimer);
    var at = canRenew && signed ? expiresAt(signed) : 0;
    if (!at) return;
    var left = at - Date.now();
    var wait = left <= 0 ? 0 : Math.max(left - Math.min(RENEW_AHEAD, left / 2), 1000);
    renewTimer = setTimeout(renewToken, Math.min(wait, 2147483647));
  }

  // The secret naming the visitor this frame starts on its first message (sent until it
  // holds our token): that message, sent again after a 503 that came once it was stored,
  // lands with the same visitor. A fresh one for each visitor started.
  function newVisitor() {
    var bytes = new Uint8Array(24);
    global.crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
  }
  var starting = newVisitor();

  function anonymous() {
    try { return localStorage.getItem(storeKey) || remembered; } catch (e) { return remembered; }
  }
  function token() { return signed || anonymous(); }

  config.authHeaders = function () {
    var t = token();
    var headers = {};
    if (t) headers[config.visitorHeader] = t;
    else headers[config.newVisitorHeader] = starting;
    return headers;
  };
  config.socketParams = function () {
    var t = token();
    return t ? { visitor: t } : null; // no socket until there is someone to follow
  };
  config.onSent = function (data) {
    if (data.visitor) {
      remembered = data.visitor;
      starting = newVisitor(); // this one is started: a token forgotten later starts another
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
        starting = newVisitor();
        return "forgotten";
      }
      return undefined;
    }
    // The host page's token: retrying will not make it valid, a fresh one from the host may.
    if (where === "socket") {
      return renewToken().then(function (renewed) { return renewed ? "renewed" : "blocked"; });
    }
    if (where === "send" && /expired/.test(data.error || "")) {
      return renewToken().then(function (renewed) { return renewed ? "renewed" : undefined; });
    }
    return undefined;
  };
  var chat = new QorvenChat(document.getElementById("chat"), config);
  if (canRenew && signed && expiresAt(signed) <= Date.now()) {
    // Expired already (a page left open, then the frame opened): start with a fresh one.
    renewToken().then(function () { chat.start(); });
  } else {
    renewSoon();
    chat.start();
  }
  window.addEventListener("message", function (e) {
    if (e.data === "qorven:open") chat.input.focus();
  });
  // Escape in the chat closes it (the host page's widget puts the focus back on its button).
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape" && !e.defaultPrevented) global.parent.postMessage({ type: "qorven:close" }, "*");
  });
})(window);
