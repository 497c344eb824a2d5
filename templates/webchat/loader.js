/* Qorven webchat embed. Include with:
 *   <script src="https://<qorven>/webchat/<key>.js" async></script>
 * and, for a signed-in visitor, data-token="<the token your server signed>" on the tag,
 * plus data-token-url="<a URL of your site that answers a fresh token as text>" (or
 * window.QorvenWebchat = {token, refreshToken: () => a token or a promise of one}) so the
 * chat renews it before it expires.
 * It adds a chat bubble; the chat itself runs in a frame served by Qorven. */
(function () {
  "use strict";
  if (window.__qorvenWebchat) return;
  window.__qorvenWebchat = true;
  var script = document.currentScript;
  var options = window.QorvenWebchat || {};
  var token = (script && script.getAttribute("data-token")) || options.token || "";
  var tokenUrl = script && script.getAttribute("data-token-url");
  var renew = typeof options.refreshToken === "function" ? options.refreshToken
    : tokenUrl ? function () {
      return fetch(tokenUrl, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
        if (!r.ok) throw new Error("the token URL answered " + r.status);
        return r.text();
      });
    } : null;
  var frameUrl = {{ frame_url|safe }} + (token ? "#token=" + encodeURIComponent(token) + (renew ? "&renew=1" : "") : "");
  var origin = new URL(frameUrl).origin;

  var style = document.createElement("style");
  style.textContent =
    ".qorven-bubble{position:fixed;right:20px;bottom:20px;width:58px;height:58px;border-radius:50%;border:none;" +
    "background:#4f46e5;color:#fff;box-shadow:0 8px 24px rgba(0,0,0,.22);cursor:pointer;z-index:2147483646;" +
    "display:grid;place-items:center;transition:transform .15s}" +
    ".qorven-bubble:hover{transform:scale(1.06)}" +
    "@media (prefers-reduced-motion:reduce){.qorven-bubble{transition:none}.qorven-bubble:hover{transform:none}}" +
    ".qorven-frame{position:fixed;right:20px;bottom:92px;width:380px;height:min(600px,calc(100vh - 120px));border:none;" +
    "border-radius:16px;box-shadow:0 16px 48px rgba(0,0,0,.25);z-index:2147483647;background:#fff;display:none}" +
    ".qorven-frame.qorven-open{display:block}" +
    "@media (max-width:480px){.qorven-frame{right:0;bottom:0;width:100vw;height:100%;border-radius:0}" +
    ".qorven-bubble.qorven-open{z-index:2147483647;top:10px;right:10px;bottom:auto;width:40px;height:40px}}";
  document.head.appendChild(style);

  var frame = document.createElement("iframe");
  frame.className = "qorven-frame";
  frame.id = "qorven-chat-" + Math.random().toString(36).slice(2);
  frame.title = "Chat";
  frame.setAttribute("allow", "clipboard-write");
  var loaded = false;
  var ready = false; // the frame's page has loaded and listens
  frame.addEventListener("load", function () {
    ready = true;
    if (frame.classList.contains("qorven-open")) frame.contentWindow.postMessage("qorven:open", origin);
  });

  var bubble = document.createElement("button");
  bubble.className = "qorven-bubble";
  bubble.type = "button";
  bubble.setAttribute("aria-label", "Open chat");
  bubble.setAttribute("aria-expanded", "false");
  bubble.setAttribute("aria-controls", frame.id);
  var chatIcon = '<svg width="26" height="26" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round" aria-hidden="true"><path d="M21 15a2 2 0 0 1-2 2H7l-4 4V5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2z"/></svg>';
  var closeIcon = '<svg width="22" height="22" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2.2" stroke-linecap="round" aria-hidden="true"><path d="M18 6 6 18M6 6l12 12"/></svg>';
  bubble.innerHTML = chatIcon;
  function show(open) {
    if (open && !loaded) { frame.src = frameUrl; loaded = true; }
    frame.classList.toggle("qorven-open", open);
    bubble.classList.toggle("qorven-open", open);
    bubble.innerHTML = open ? closeIcon : chatIcon;
    bubble.setAttribute("aria-label", open ? "Close chat" : "Open chat");
    bubble.setAttribute("aria-expanded", open ? "true" : "false");
    if (open && ready) frame.contentWindow.postMessage("qorven:open", origin); // else: on load
    if (!open) bubble.focus();
  }
  bubble.addEventListener("click", function () { show(!frame.classList.contains("qorven-open")); });
  // Escape closes the chat: on the host page, and in the chat (which says so: qorven:close).
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape" && frame.classList.contains("qorven-open")) show(false);
  });

  // The frame asks for a fresh signed token before its own expires (or once refused); the
  // answer goes to Qorven's origin only. An empty one means none: the frame says so.
  window.addEventListener("message", function (e) {
    if (e.source !== frame.contentWindow || e.origin !== origin) return;
    if (e.data && e.data.type === "qorven:close") { if (frame.classList.contains("qorven-open")) show(false); return; }
    if (!e.data || e.data.type !== "qorven:token-needed") return;
    var answer = function (fresh) {
      frame.contentWindow.postMessage({ type: "qorven:token", token: fresh }, origin);
    };
    if (!renew) { answer(""); return; }
    Promise.resolve().then(renew).then(
      function (fresh) { answer(typeof fresh === "string" ? fresh.trim() : ""); },
      function (err) {
        if (window.console) console.warn("Qorven webchat: could not renew the visitor token:", err);
        answer("");
      });
  });

  function mount() {
    document.body.appendChild(frame);
    document.body.appendChild(bubble);
  }
  if (document.body) mount(); else document.addEventListener("DOMContentLoaded", mount);
})();
