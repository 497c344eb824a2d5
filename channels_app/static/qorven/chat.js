/* The live chat timeline, shared by the chat page and the webchat frame.
 * No dependencies, no build step. Protocol: channels_app/consumers/__init__.py.
 *
 * Every message is rendered once, keyed by seq; the socket resumes with the session and
 * the last seq seen, so a reconnect shows exactly what was missed. Message text only
 * ever reaches the DOM through QorvenMarkdown.render (escaped first) or textContent.
 */
(function (global) {
  "use strict";

  var md = global.QorvenMarkdown;

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function dayLabel(date) {
    var today = new Date();
    var yesterday = new Date(Date.now() - 86400000);
    if (date.toDateString() === today.toDateString()) return "Today";
    if (date.toDateString() === yesterday.toDateString()) return "Yesterday";
    return date.toLocaleDateString(undefined, { weekday: "short", day: "numeric", month: "short", year: date.getFullYear() === today.getFullYear() ? undefined : "numeric" });
  }

  function timeLabel(date) {
    return date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
  }

  // Delivery platforms (binding kinds, channels_app.delivery.PLATFORM_OF) as people write them.
  var PLATFORMS = { telegram: "Telegram", whatsapp: "WhatsApp", slack: "Slack", discord: "Discord", email: "Email", sms: "SMS" };

  // A response's JSON, as { json: true, data }. A body that is not ours (a proxy's HTML
  // error page: a 502 while the server restarts, a 413 over its body limit; a body cut
  // short) becomes { json: false, data: { error } } with our words for its status, never
  // a JSON parser's complaint.
  // A 5xx's words are ours too, JSON or not: a proxy's JSON error page says what it likes,
  // at any length. A 503 of ours names why in its "code" (README, "Errors are JSON").
  function bodyOf(r) {
    var fallback = { json: false, data: { error: statusWords(r.status) } };
    if ((r.headers.get("Content-Type") || "").toLowerCase().indexOf("application/json") === -1) {
      return Promise.resolve(fallback);
    }
    return r.json().then(function (data) {
      if (r.status >= 500 && data && typeof data === "object") {
        var known = r.status === 503 && Object.prototype.hasOwnProperty.call(UNAVAILABLE, data.code);
        data = { error: known ? UNAVAILABLE[data.code] : statusWords(r.status), code: known ? data.code : undefined };
      }
      return { json: true, data: data };
    }, function () { return fallback; });
  }

  // Our notices for the 503s of ours, by their "code".
  var UNAVAILABLE = {
    database_unavailable: "Qorven's database is unavailable just now; your message is back in the box to send again.",
    stop_unavailable: "The reply could not be stopped just now: try again in a moment.",
  };

  function statusWords(status) {
    if (status === 413) return "That is too large to send: attach a smaller file, or send less at once.";
    if (status === 429) return "Too many messages at once: wait a moment, then send it again.";
    if (status >= 500 || !status) return "Qorven could not take the message just now; it is back in the box to send again.";
    return "That could not be sent (HTTP " + status + "); it is back in the box.";
  }

  // Markdown as the words a screen reader says: its text, on one line, cut at a word past
  // `limit` characters (a long reply is there to read in full in its article).
  function speakable(markdown, limit) {
    var scratch = document.createElement("template"); // inert: no image in it loads
    scratch.innerHTML = md.render(markdown || "");
    var text = scratch.content.textContent.replace(/\s+/g, " ").trim();
    if (text.length > limit) text = text.slice(0, limit).replace(/\s+\S*$/, "") + "…";
    return text;
  }

  function platformName(kind) {
    return PLATFORMS[kind] || (kind ? kind.charAt(0).toUpperCase() + kind.slice(1) : "");
  }

  function Chat(root, config) {
    this.root = root;
    this.config = config;
    this.timeline = root.querySelector("[data-timeline]");
    this.scroller = root.querySelector("[data-scroller]") || this.timeline;
    this.section = this.newSection();
    this.pinned = true; // the view follows the newest message
    this.autoScrollTop = 0;
    this.status = root.querySelector("[data-status]");
    this.form = root.querySelector("[data-composer]");
    this.input = root.querySelector("[data-input]");
    this.sendButton = root.querySelector("[data-send]");
    this.outbox = []; // messages sent from the box, waiting for the one on its way
    this.jump = root.querySelector("[data-jump]");
    this.stopButton = root.querySelector("[data-stop]");
    this.older = root.querySelector("[data-older]");
    this.sessionId = null;
    this.lastSeq = 0;
    this.oldestSeq = null;
    this.more = false;
    this.loadingOlder = false;
    this.filter = "";
    this.bySeq = new Map();
    this.streams = new Map(); // reply_to -> {node, text}
    this.finished = new Set();
    this.answered = new Set(); // seqs an assistant reply answered (for good)
    this.announcer = root.querySelector("[data-announcer]");
    this.announced = new Set(); // "session:seq" of what was said, so nothing is said twice
    // Messages stored before the page was served are history (the server's clock, as theirs).
    this.openedAt = typeof config.openedAt === "number" ? config.openedAt : Date.now();
    this.socket = null;
    this.attempt = 0;
    this.closed = false;
    this.pingTimer = null;
    this.pongTimer = null;
    this.bind();
  }

  Chat.prototype.bind = function () {
    var self = this;
    if (this.form) {
      this.form.addEventListener("submit", function (e) { e.preventDefault(); self.submit(); });
      this.input.addEventListener("keydown", function (e) {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
          e.preventDefault();
          self.submit();
        }
      });
      this.input.addEventListener("input", function () { self.autosize(); });
      this.attached = [];
      this.picker = this.root.querySelector("[data-attach]");
      this.tray = this.root.querySelector("[data-attachments]");
      if (this.picker && this.config.images) {
        this.picker.addEventListener("change", function () {
          self.attach(Array.prototype.slice.call(self.picker.files || []));
          self.picker.value = "";
        });
        this.input.addEventListener("paste", function (e) {
          var files = Array.prototype.slice.call((e.clipboardData && e.clipboardData.files) || []);
          if (files.length) { e.preventDefault(); self.attach(files); }
        });
      } else if (this.picker) {
        this.picker.closest("[data-attach-label]").hidden = true;
      }
    }
    this.scroller.addEventListener("scroll", function () {
      if (self.scroller.scrollTop < 120) self.loadOlder();
      // Following the bottom until the reader scrolls up from where we last put it (a
      // paint that grew the page meanwhile is not the reader leaving).
      self.pinned = self.nearBottom() || self.scroller.scrollTop >= self.autoScrollTop - 2;
      if (self.pinned && self.jump) self.jump.hidden = true;
    });
    if (this.jump) this.jump.addEventListener("click", function () { self.scrollToBottom(); });
    if (this.stopButton) this.stopButton.addEventListener("click", function () { self.stopReply(); });
    if (this.older) this.older.addEventListener("click", function () { self.loadOlder(); });
    this.root.querySelectorAll("[data-filter]").forEach(function (chip) {
      chip.addEventListener("click", function () { self.setFilter(chip.getAttribute("data-filter")); });
    });
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) self.seen();
      if (!document.hidden && (!self.socket || self.socket.readyState > 1)) self.connect(true);
    });
    var fresh = this.root.querySelector("[data-new-conversation]");
    if (fresh) fresh.addEventListener("click", function () {
      if (global.confirm("Start a new conversation? This one is archived; what the Qor remembers stays.")) self.command("/clear");
    });
    var archiveOpen = this.root.querySelector("[data-archive-open]");
    if (archiveOpen) {
      archiveOpen.addEventListener("click", function () { self.openArchive(); });
      this.root.querySelector("[data-archive-close]").addEventListener("click", function () {
        self.root.querySelector("[data-archive]").close();
      });
      this.root.querySelector("[data-archive-back]").addEventListener("click", function () {
        if (self.lastSearch) self.search(self.lastSearch); else self.openArchive();
      });
      var searchForm = this.root.querySelector("[data-search]");
      if (searchForm && this.config.search) {
        searchForm.addEventListener("submit", function (e) {
          e.preventDefault();
          var q = searchForm.querySelector("[data-search-input]").value.trim();
          if (q) self.search(q); else self.openArchive();
        });
      } else if (searchForm) {
        searchForm.hidden = true;
      }
    }
    var memoriesOpen = this.root.querySelector("[data-memories-open]");
    if (memoriesOpen && global.QorvenMemories && this.config.memories) {
      this.memories = new global.QorvenMemories(this, memoriesOpen);
    } else if (memoriesOpen) {
      memoriesOpen.hidden = true;
    }
    var bell = this.root.querySelector("[data-notify]");
    if (bell) {
      try { this.notifying = localStorage.getItem("qorven.notify") === "1" && global.Notification && Notification.permission === "granted"; } catch (e) {}
      bell.setAttribute("aria-pressed", this.notifying ? "true" : "false");
      bell.addEventListener("click", function () { self.toggleNotifications(bell); });
    }
    global.addEventListener("online", function () { self.connect(true); });
  };

  // --- connection ---

  Chat.prototype.setStatus = function (state, text) {
    if (!this.status) return;
    this.status.setAttribute("data-state", state);
    this.status.querySelector("[data-status-text]").textContent = text;
    this.root.setAttribute("data-connection", state);
  };

  Chat.prototype.connect = function (now) {
    var self = this;
    if (this.closed) return;
    var params = this.config.socketParams ? this.config.socketParams() : {};
    if (params === null) { this.setStatus("idle", "Ready"); return; }
    if (this.socket && this.socket.readyState <= 1) return;
    clearTimeout(this.retryTimer);
    if (this.sessionId !== null) {
      params.session = this.sessionId;
      params.last_seq = this.lastSeq;
    }
    var query = Object.keys(params).map(function (k) { return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]); }).join("&");
    var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + this.config.socket + (query ? "?" + query : "");
    this.setStatus("connecting", this.attempt ? "Reconnecting…" : "Connecting…");
    var socket = new WebSocket(url);
    this.socket = socket;
    socket.onopen = function () {
      self.attempt = 0;
      self.setStatus("live", "Live");
      self.startPing();
    };
    socket.onmessage = function (e) {
      var event;
      try { event = JSON.parse(e.data); } catch (err) { return; }
      self.handle(event);
    };
    var opened = false;
    socket.addEventListener("open", function () { opened = true; });
    socket.onclose = function (e) {
      if (self.socket !== socket) return;
      self.stopPing();
      self.socket = null;
      if (self.closed) return;
      // Closed because the sign-in behind it ended, or refused at the handshake (a sign-in
      // that ended while the page was away, or a server that is down): ask the server
      // whether this browser is still signed in (a password change signs the changing tab
      // in again under a new session) instead of retrying for ever.
      self.attempt += 1;
      var delay = Math.min(15000, 500 * Math.pow(2, Math.min(self.attempt, 5))) * (0.75 + Math.random() / 2);
      if (now && self.attempt === 1) delay = 0;
      self.setStatus("offline", "Offline — reconnecting");
      var retry = function (handled) {
        if (!handled && !self.closed) self.retryTimer = setTimeout(function () { self.connect(); }, delay);
      };
      if (e.code === 4401 || !opened) {
        var checked = self.checkSignedIn();
        // A webchat visitor's refused token decides whether to try again at all.
        if (!self.config.signIn) { checked.then(retry); return; }
      }
      retry(false);
    };
  };

  // The page's sign-in ended (here, in another tab, or by a password change): say so and
  // stop, rather than retrying a socket the server will keep refusing.
  Chat.prototype.signedOut = function () {
    if (this.isSignedOut) return;
    this.isSignedOut = true;
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.stopPing();
    if (this.socket) { var socket = this.socket; this.socket = null; socket.close(); }
    this.streams.forEach(function (s) { s.node.remove(); });
    this.streams.clear();
    this.updateStop();
    this.setStatus("signed-out", "Signed out");
    var note = el("div", "signedout");
    note.setAttribute("role", "alert");
    note.setAttribute("data-signed-out", "");
    note.appendChild(document.createTextNode("You are signed out. "));
    var link = el("a", "", "Sign in again");
    link.href = this.config.signIn + (this.config.signIn.indexOf("?") < 0 ? "?" : "&") + "next=" + encodeURIComponent(location.pathname);
    note.appendChild(link);
    (this.form || this.timeline).insertAdjacentElement("beforebegin", note);
    if (this.input) this.input.disabled = true;
    if (this.sendButton) this.sendButton.disabled = true;
  };

  // After a refused socket: a page asks whether it is still signed in; the webchat frame
  // (no sign-in, a visitor token) asks whether its token is still taken, and hears from
  // `config.onRefused(data, "socket")` what to do about one that is not: "forgotten" (an
  // anonymous token dropped: wait for the visitor's next message, which starts anew),
  // "renewed" (the host page signed a fresh one: connect with it) or "blocked" (the host
  // page's token, and no fresh one: retrying cannot help, say so and stop).
  // Resolves to true when it dealt with the refusal itself (no retry wanted).
  Chat.prototype.checkSignedIn = function () {
    var self = this;
    if ((!this.config.signIn && !this.config.onRefused) || this.checkingSignIn) return Promise.resolve(false);
    this.checkingSignIn = true;
    return fetch(this.config.messages + "?before_seq=1", { headers: this.headers(), credentials: "same-origin" })
      .then(function (r) {
        if (r.status === 401 && self.config.signIn) { self.signedOut(); return true; }
        if ((r.status === 401 || r.status === 403) && !self.config.signIn) {
          return bodyOf(r).then(function (body) { return self.visitorRefused(body.data); });
        }
        return false;
      })
      .catch(function () { return false; })
      .then(function (handled) { self.checkingSignIn = false; return handled; });
  };

  Chat.prototype.visitorRefused = function (data) {
    var self = this;
    // The answer may take a moment: a fresh token asked of the host page ("renewed").
    return Promise.resolve(this.config.onRefused(data, "socket")).then(function (next) {
      if (next === "forgotten" || next === "renewed") {
        clearTimeout(self.retryTimer);
        self.attempt = 0;
        self.connect(); // forgotten: no token now, idle until the next message
        return true;
      }
      if (next === "blocked") {
        self.closed = true;
        clearTimeout(self.retryTimer);
        self.stopPing();
        self.setStatus("refused", "Not connected");
        var note = el("div", "signedout");
        note.setAttribute("role", "alert");
        note.setAttribute("data-refused", "");
        note.appendChild(document.createTextNode(
          "This chat could not confirm who you are (" + (data.error || "refused") + "). Reload the page to try again."));
        (self.form || self.timeline).insertAdjacentElement("beforebegin", note);
        if (self.input) self.input.disabled = true;
        if (self.sendButton) self.sendButton.disabled = true;
        return true;
      }
      return false;
    });
  };

  Chat.prototype.startPing = function () {
    var self = this;
    this.stopPing();
    this.pingTimer = setInterval(function () {
      if (!self.socket || self.socket.readyState !== 1) return;
      self.socket.send(JSON.stringify({ type: "ping" }));
      self.pongTimer = setTimeout(function () { if (self.socket) self.socket.close(); }, 10000);
    }, 25000);
  };

  Chat.prototype.stopPing = function () {
    clearInterval(this.pingTimer);
    clearTimeout(this.pongTimer);
  };

  // --- events ---

  Chat.prototype.handle = function (event) {
    switch (event.type) {
      case "session": return this.onSession(event);
      case "message.new": return this.onMessage(event, true);
      case "message.stream": return this.onStream(event.reply_to, event.text, 0, true);
      case "message.chunk": return this.onStream(event.reply_to, event.delta, event.offset, false);
      case "message.done": return this.endStream(event.reply_to);
      case "message.answer": return this.onAnswer(event.seq, event.answer_state);
      case "message.delivery": return this.onDelivery(event.seq, event.delivery);
      case "message.transcribed": return this.onTranscribed(event.seq, event.content);
      case "message.regenerating": return this.onRegenerating(event.reply_to, event.superseded || []);
      case "pong": clearTimeout(this.pongTimer); return;
      case "signed_out": return; // the close that follows (4401) checks the sign-in
    }
  };

  Chat.prototype.onSession = function (event) {
    var changed = event.session_id !== this.sessionId;
    if (event.reset) {
      this.clear();
    } else if (changed && this.sessionId !== null) {
      this.streams.forEach(function (s) { s.node.remove(); });
      this.streams.clear();
      this.updateStop();
      this.timeline.appendChild(el("div", "divider divider--session", "New conversation"));
      this.section = this.newSection();
      this.bySeq = new Map();
      this.finished.clear();
      this.answered.clear();
      this.lastDay = null;
    }
    if (changed || event.reset) {
      this.lastSeq = 0;
      this.oldestSeq = null;
      this.more = false;
    }
    this.sessionId = event.session_id;
    if (event.session_id !== null) this.section.setAttribute("data-session", event.session_id);
    this.updateEmpty();
  };

  // Each session's messages have a container of their own: seqs start again in a new
  // session, so ordering by seq (and loading older pages) stays within it.
  Chat.prototype.newSection = function () {
    var section = el("div", "timeline__session");
    this.timeline.appendChild(section);
    return section;
  };

  Chat.prototype.clear = function () {
    // An error just shown (a file refused, the server unreachable) outlives the timeline's
    // reset (a socket that reconnects starts it again): it goes away on its own timer.
    var alerts = Array.prototype.slice.call(this.timeline.querySelectorAll(".msg--error[role=alert]"));
    this.timeline.textContent = "";
    this.section = this.newSection();
    alerts.forEach(function (note) { this.timeline.appendChild(note); }, this);
    this.bySeq = new Map();
    this.streams.clear();
    this.finished.clear();
    this.answered.clear();
    this.lastDay = null;
    this.firstDay = null;
  };

  Chat.prototype.onMessage = function (event, live) {
    if (this.bySeq.has(event.seq)) return;
    // What this page is sending, stored: the socket can bring it before the POST is answered.
    var sending = this.pendingSend;
    if (sending && event.role === "user" && event.channel === sending.channel && event.content === sending.content) {
      sending.node.remove();
      this.pendingSend = null;
    }
    if (this.oldestSeq === null || event.seq < this.oldestSeq) {
      this.oldestSeq = event.seq;
      this.more = event.seq > 1;
    }
    if (event.seq > this.lastSeq) this.lastSeq = event.seq;
    if (event.reply_to && !event.hidden && (event.role === "assistant" || event.role === "system")) {
      this.finished.add(event.reply_to);
      if (event.role === "assistant") this.onAnswered(event.reply_to);
      var stream = this.streams.get(event.reply_to);
      if (stream) { stream.node.remove(); this.streams.delete(event.reply_to); }
      this.updateStop();
    }
    if (event.hidden) { this.bySeq.set(event.seq, null); return; }
    var node = this.renderMessage(event);
    this.bySeq.set(event.seq, node);
    this.place(node, event);
    if (this.filter) this.tidyDividers();
    if (event.answer_state === "failed") this.endStream(event.seq);
    this.updateEmpty();
    this.updateRegenerate();
    if (live) {
      this.afterGrow();
      if (event.role !== "user") this.arrivedUnseen(event);
      this.announce(event);
    }
  };

  // --- what a screen reader is told ---

  // The list itself is not live (a load or a reset would read it all out, a reply would be
  // read with its buttons): one hidden live element says, once each, what is new while
  // the page is open — a reply when it is whole, a notice, a message from another channel.
  // Never the history (stored before the page was served), never what this page sent.
  Chat.prototype.announce = function (event) {
    if (!this.announcer || event.hidden) return;
    var key = this.sessionId + ":" + event.seq;
    if (this.announced.has(key) || !(Date.parse(event.created_at) >= this.openedAt)) return;
    var text = speakable(event.content, 300) || ((event.attachments || []).length ? "(attachment)" : "");
    var words;
    if (event.role === "system") {
      words = text;
    } else if (event.role === "assistant") {
      words = this.config.qorName + ": " + text + (event.stopped ? " (Stopped)" : "");
    } else if (event.channel !== this.config.channel) {
      words = this.who(event) + ": " + text;
    }
    if (!words || !text) return;
    this.announced.add(key);
    this.say(words);
  };

  Chat.prototype.say = function (words) {
    if (!this.announcer) return;
    // Added, not replaced: two arriving together are both said, and the same words twice too.
    this.announcer.appendChild(el("div", null, words));
    while (this.announcer.childNodes.length > 5) this.announcer.removeChild(this.announcer.firstChild);
  };

  // While a modal dialog is open a screen reader reads only the dialog: the announcer
  // goes into it (what arrives meanwhile, and what the dialog says, is still heard) and
  // back to its place when the dialog closes.
  Chat.prototype.lendAnnouncer = function (dialog) {
    var announcer = this.announcer;
    if (!announcer || announcer.parentNode === dialog) return;
    var home = announcer.parentNode, next = announcer.nextSibling;
    dialog.appendChild(announcer);
    dialog.addEventListener("close", function back() {
      dialog.removeEventListener("close", back);
      home.insertBefore(announcer, next && next.parentNode === home ? next : null);
    });
  };

  // Who wrote a message, as its article is named: "Aria", "You", "Alice on Telegram".
  Chat.prototype.who = function (event) {
    var name = event.sender_name || (event.role === "assistant" ? this.config.qorName : "You");
    if (event.channel && event.channel !== this.config.channel) {
      name += " on " + ((this.config.labels || {})[event.channel] || platformName(event.channel));
    }
    return name;
  };

  // --- a reply (or a heartbeat) arriving while the tab is in the background ---

  Chat.prototype.arrivedUnseen = function (event) {
    if (!document.hidden) return;
    this.unread = (this.unread || 0) + 1;
    if (this.baseTitle === undefined) this.baseTitle = document.title;
    document.title = "(" + this.unread + ") " + this.baseTitle;
    if (this.notifying && global.Notification && Notification.permission === "granted") {
      var title = event.proactive ? (this.config.qorName + " · " + (event.heartbeat_name || "scheduled")) : this.config.qorName;
      try { new Notification(title, { body: (event.content || "").slice(0, 180), tag: "qorven-" + event.seq }); } catch (e) {}
    }
  };

  Chat.prototype.seen = function () {
    if (!this.unread) return;
    this.unread = 0;
    document.title = this.baseTitle;
  };

  Chat.prototype.toggleNotifications = function (button) {
    var self = this;
    if (!global.Notification) { this.flash("This browser cannot show notifications."); return; }
    var apply = function () {
      self.notifying = !self.notifying && Notification.permission === "granted";
      try { localStorage.setItem("qorven.notify", self.notifying ? "1" : ""); } catch (e) {}
      button.setAttribute("aria-pressed", self.notifying ? "true" : "false");
      if (Notification.permission === "denied") self.flash("Notifications are blocked for this site in the browser's settings.");
    };
    if (Notification.permission === "default") Notification.requestPermission().then(apply);
    else apply();
  };

  // --- earlier conversations (archived by /clear, a compaction, a rotation), read-only ---

  Chat.prototype.openArchive = function () {
    var self = this;
    var view = this.view = (this.view || 0) + 1; // what the dialog shows now: a later click wins
    this.lastSearch = "";
    var dialog = this.root.querySelector("[data-archive]");
    var body = dialog.querySelector("[data-archive-body]");
    dialog.querySelector("[data-archive-title]").textContent = "Earlier conversations";
    dialog.querySelector("[data-archive-back]").hidden = true;
    body.textContent = "Loading…";
    if (!dialog.open) { dialog.showModal(); this.lendAnnouncer(dialog); }
    fetch(this.config.conversations, { headers: this.headers(), credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.json(); })
      .then(function (data) {
        if (self.view !== view) return;
        body.textContent = "";
        if (!data.conversations.length) { body.appendChild(el("p", "archive__none", "No earlier conversations yet.")); return; }
        var list = el("ul", "archive__list");
        data.conversations.forEach(function (c) {
          var item = el("li");
          var open = el("button", "archive__item");
          open.type = "button";
          open.setAttribute("data-archived-session", c.session_id);
          open.appendChild(el("span", "archive__when", new Date(c.started_at).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" })));
          open.appendChild(el("span", "archive__opening", c.opening || "(no message of yours)"));
          open.appendChild(el("span", "archive__count", c.messages + (c.messages === 1 ? " message" : " messages")));
          open.addEventListener("click", function () { self.readArchived(c); });
          item.appendChild(open);
          list.appendChild(item);
        });
        body.appendChild(list);
        keepFocus(dialog, list.querySelector("button"));
      })
      .catch(function () { if (self.view === view) body.textContent = "Can't reach Qorven — try again in a moment."; });
  };

  // The button the keyboard was on went with the view it opened (a conversation chosen,
  // "← All", "Show earlier messages"): the focus goes to what replaced it, not to the page.
  function keepFocus(dialog, target) {
    var active = document.activeElement;
    if (target && (!active || active === document.body || !dialog.contains(active))) target.focus({ preventScroll: true });
  }

  // One message of a conversation read in the dialog (no buttons: it is read-only).
  Chat.prototype.archivedNode = function (m, sessionId) {
    var node = el("article", "msg msg--" + m.role + (m.role === "system" ? " msg--notice" : ""));
    node.setAttribute("data-seq", m.seq);
    node.setAttribute("aria-label", (m.role === "system" ? "Notice" : this.who(m)) + ", " + timeLabel(new Date(m.created_at)));
    var meta = el("header", "msg__meta");
    meta.appendChild(el("span", "msg__who", m.sender_name || (m.role === "assistant" ? this.config.qorName : "You")));
    if (m.channel !== this.config.channel) meta.appendChild(this.badge(m.channel));
    var when = new Date(m.created_at);
    var stamp = el("time", "msg__time", timeLabel(when));
    stamp.title = when.toLocaleString(undefined, { dateStyle: "full", timeStyle: "short" });
    meta.appendChild(stamp);
    var text = el("div", "msg__body");
    text.innerHTML = md.render(m.content);
    node.appendChild(meta);
    node.appendChild(text);
    this.renderImages(node, m.attachments, sessionId, m.seq);
    return node;
  };

  // A page of a conversation read in the dialog: `?before_seq=` or `?after_seq=`.
  Chat.prototype.archivedPage = function (sessionId, which, seq) {
    var url = this.config.messages + "?session=" + sessionId + (seq ? "&" + which + "=" + seq : "");
    return fetch(url, { headers: this.headers(), credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.json(); });
  };

  Chat.prototype.readArchived = function (conversation, beforeSeq, older) {
    var self = this;
    var dialog = this.root.querySelector("[data-archive]");
    var body = dialog.querySelector("[data-archive-body]");
    if (!older) {
      dialog.querySelector("[data-archive-title]").textContent =
        "Conversation of " + new Date(conversation.started_at).toLocaleDateString(undefined, { dateStyle: "medium" });
    }
    dialog.querySelector("[data-archive-back]").hidden = false;
    // An earlier page belongs to the view it was asked from; a conversation opened is a new one.
    var view = this.view = older ? this.view : (this.view || 0) + 1;
    this.archivedPage(conversation.session_id, "before_seq", beforeSeq)
      .then(function (data) {
        if (self.view !== view) return;
        var page = document.createDocumentFragment();
        var messages = (data.messages || []).filter(function (m) { return !m.hidden; });
        if (data.more && data.messages.length) {
          var more = el("button", "linkbutton archive__more", "Show earlier messages");
          more.type = "button";
          more.setAttribute("data-archive-earlier", "");
          more.addEventListener("click", function () { more.remove(); self.readArchived(conversation, data.messages[0].seq, true); });
          page.appendChild(more);
        }
        messages.forEach(function (m) { page.appendChild(self.archivedNode(m, data.session_id)); });
        if (!older) body.textContent = "";
        body.insertBefore(page, body.firstChild);
        keepFocus(dialog, body);
      })
      .catch(function () { if (self.view === view) body.textContent = "Can't reach Qorven — try again in a moment."; });
  };

  // A message the search found, in its place: the page before it (with it) and the page
  // after it (its answer first), scrolled to it, marked and focused, with a way on to the
  // end of the conversation and back to the live one.
  Chat.prototype.readAround = function (hit, title) {
    var self = this;
    var dialog = this.root.querySelector("[data-archive]");
    var body = dialog.querySelector("[data-archive-body]");
    var conversation = { session_id: hit.session_id, started_at: hit.created_at };
    dialog.querySelector("[data-archive-title]").textContent = title;
    dialog.querySelector("[data-archive-back]").hidden = false;
    var view = this.view = (this.view || 0) + 1; // what the dialog shows now: a later click wins
    body.textContent = "Loading…";
    body.focus({ preventScroll: true }); // the result clicked goes: the keyboard stays in the dialog
    Promise.all([this.archivedPage(hit.session_id, "before_seq", hit.seq + 1),
                 this.archivedPage(hit.session_id, "after_seq", hit.seq)])
      .then(function (pages) {
        if (self.view !== view) return;
        var before = pages[0], after = pages[1];
        body.textContent = "";
        if (before.more && before.messages.length) {
          var more = el("button", "linkbutton archive__more", "Show earlier messages");
          more.type = "button";
          more.setAttribute("data-archive-earlier", "");
          more.addEventListener("click", function () { more.remove(); self.readArchived(conversation, before.messages[0].seq, true); });
          body.appendChild(more);
        }
        var found = null;
        before.messages.concat(after.messages).forEach(function (m) {
          if (m.hidden) return;
          var node = self.archivedNode(m, before.session_id);
          if (m.seq === hit.seq) {
            found = node;
            node.classList.add("msg--found");
            node.setAttribute("aria-current", "true");
            node.setAttribute("aria-label", "Found: " + node.getAttribute("aria-label"));
            node.tabIndex = -1;
          }
          body.appendChild(node);
        });
        var end = el("div", "archive__end");
        self.laterButton(end, hit.session_id, after);
        var live = el("button", "linkbutton", hit.archived ? "Back to the conversation going on" : "Go to the newest message");
        live.type = "button";
        live.setAttribute("data-archive-live", "");
        live.addEventListener("click", function () { self.backToLive(); });
        end.appendChild(live);
        body.appendChild(end);
        if (found) {
          found.scrollIntoView({ block: "center" });
          found.focus({ preventScroll: true });
        } else {
          body.insertBefore(el("p", "archive__none", "That message is no longer kept."), body.firstChild);
          keepFocus(dialog, live);
        }
      })
      .catch(function () { if (self.view === view) body.textContent = "Can't reach Qorven — try again in a moment."; });
  };

  // "Show later messages" before `end` while the last page read was full.
  Chat.prototype.laterButton = function (end, sessionId, page) {
    var self = this;
    var messages = page.messages || [];
    if (!page.more || !messages.length) return;
    var later = el("button", "linkbutton archive__more", "Show later messages");
    later.type = "button";
    later.setAttribute("data-archive-later", "");
    later.addEventListener("click", function () {
      var view = self.view;
      later.disabled = true;
      self.archivedPage(sessionId, "after_seq", messages[messages.length - 1].seq)
        .then(function (next) {
          if (self.view !== view) return;
          var first = null;
          (next.messages || []).forEach(function (m) {
            if (m.hidden) return;
            var node = self.archivedNode(m, sessionId);
            first = first || node;
            end.parentNode.insertBefore(node, end);
          });
          later.remove();
          self.laterButton(end, sessionId, next);
          if (first) { first.tabIndex = -1; first.focus(); } else { end.querySelector("button").focus(); }
        })
        .catch(function () {
          if (self.view !== view) return;
          later.disabled = false;
          self.say("Can't reach Qorven — try again in a moment.");
        });
    });
    end.appendChild(later);
  };

  // Out of the dialog to the end of the conversation going on, the composer ready.
  Chat.prototype.backToLive = function () {
    this.root.querySelector("[data-archive]").close();
    this.scrollToBottom();
    if (this.input && !this.input.disabled) this.input.focus();
  };

  // --- searching everything the person and the Qor said (every conversation) ---

  Chat.prototype.search = function (query) {
    var self = this;
    var dialog = this.root.querySelector("[data-archive]");
    var body = dialog.querySelector("[data-archive-body]");
    this.lastSearch = query;
    var view = this.view = (this.view || 0) + 1;
    dialog.querySelector("[data-archive-title]").textContent = "Search";
    dialog.querySelector("[data-archive-back]").hidden = true;
    dialog.querySelector("[data-search-input]").value = query;
    body.textContent = "Searching…";
    if (!dialog.open) { dialog.showModal(); this.lendAnnouncer(dialog); }
    fetch(this.config.search + "?q=" + encodeURIComponent(query), { headers: this.headers(), credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.json(); })
      .then(function (data) {
        if (self.view !== view) return; // a newer search, or another view, was asked for since
        body.textContent = "";
        if (!data.results.length) {
          body.appendChild(el("p", "archive__none", "Nothing found for “" + query + "”."));
          return;
        }
        body.appendChild(el("p", "archive__count", data.results.length + (data.results.length === 50 ? "+ messages found, newest first" : (data.results.length === 1 ? " message found" : " messages found, newest first"))));
        var list = el("ul", "archive__list");
        data.results.forEach(function (hit) {
          var item = el("li");
          var open = el("button", "archive__item archive__hit");
          open.type = "button";
          open.setAttribute("data-search-hit", hit.session_id + ":" + hit.seq);
          var when = new Date(hit.created_at);
          open.appendChild(el("span", "archive__when", when.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" })));
          var snippet = el("span", "archive__snippet");
          var who = hit.role === "assistant" ? self.config.qorName : "You";
          snippet.appendChild(el("strong", null, who + ": "));
          highlight(snippet, hit.snippet, hit.marks);
          open.appendChild(snippet);
          var where = el("span", "archive__count", hit.archived ? "earlier conversation" : "this conversation");
          if (hit.channel !== self.config.channel) where.insertBefore(self.badge(hit.channel), where.firstChild);
          open.appendChild(where);
          open.addEventListener("click", function () {
            self.readAround(hit, hit.archived
              ? "Earlier conversation, " + when.toLocaleDateString(undefined, { dateStyle: "medium" })
              : "This conversation");
          });
          item.appendChild(open);
          list.appendChild(item);
        });
        body.appendChild(list);
        keepFocus(dialog, list.querySelector("button"));
      })
      .catch(function () { if (self.view === view) body.textContent = "Can't reach Qorven — try the search again in a moment."; });
  };

  // `text` into `node` with the words found marked, through text nodes only. `marks` are
  // the server's [start, end] of each word in `text`, so a word is marked as it was
  // written ("Straße" for "straße", "İstanbul" for "istanbul").
  function highlight(node, text, marks) {
    var at = 0;
    (marks || []).forEach(function (mark) {
      if (mark[0] < at || mark[1] > text.length || mark[1] <= mark[0]) return;
      node.appendChild(document.createTextNode(text.slice(at, mark[0])));
      node.appendChild(el("mark", null, text.slice(mark[0], mark[1])));
      at = mark[1];
    });
    node.appendChild(document.createTextNode(text.slice(at)));
  }

  // A slash command from a button, sent like a typed message.
  Chat.prototype.command = function (text) {
    if (!this.input || this.isSignedOut) return;
    this.input.value = text;
    this.submit();
  };

  // Insert in seq order (live messages land at the end; catch-up may fill a gap).
  Chat.prototype.place = function (node, event) {
    var date = new Date(event.created_at);
    var day = date.toDateString();
    var after = null;
    var children = this.section.querySelectorAll(".msg[data-seq]");
    var last = children.length ? children[children.length - 1] : null;
    if (!last || Number(last.getAttribute("data-seq")) < event.seq) {
      // Streaming and pending bubbles live after the section, so the end of it is the end.
      if (this.lastDay !== day) {
        this.section.appendChild(el("div", "divider", dayLabel(date)));
        this.lastDay = day;
      }
      this.section.appendChild(node);
      if (!this.firstDay) this.firstDay = day;
      return;
    }
    for (var i = 0; i < children.length; i++) {
      if (Number(children[i].getAttribute("data-seq")) > event.seq) { after = children[i]; break; }
    }
    this.section.insertBefore(node, after);
  };

  Chat.prototype.renderMessage = function (event) {
    var own = this.config.channel;
    var isNotice = event.role === "system";
    var node = el("article", "msg msg--" + event.role + (isNotice ? " msg--notice" : ""));
    node.setAttribute("data-seq", event.seq);
    node.setAttribute("data-channel", event.channel);
    if (event.notice) node.setAttribute("data-notice", event.notice);
    if (event.reply_to && event.role === "assistant") node.setAttribute("data-answers", event.reply_to);
    var date = new Date(event.created_at);
    node.setAttribute("aria-label", (isNotice ? "Notice" : this.who(event)) + ", " + timeLabel(date));
    if (isNotice) {
      var text = el("div", "notice__text");
      text.innerHTML = md.render(event.content);
      node.appendChild(text);
      var stamp = el("time", "msg__time", timeLabel(date));
      stamp.setAttribute("datetime", event.created_at);
      stamp.title = date.toLocaleString(undefined, { dateStyle: "full", timeStyle: "short" });
      node.appendChild(stamp);
    } else {
      var meta = el("header", "msg__meta");
      meta.appendChild(el("span", "msg__who", event.sender_name || (event.role === "assistant" ? this.config.qorName : "You")));
      if (event.channel !== own) meta.appendChild(this.badge(event.channel));
      var time = el("time", "msg__time", timeLabel(date));
      time.setAttribute("datetime", event.created_at);
      time.title = date.toLocaleString(undefined, { dateStyle: "full", timeStyle: "short" });
      meta.appendChild(time);
      if (event.proactive) {
        node.classList.add("msg--proactive");
        var label = el("span", "msg__proactive", event.heartbeat_name ? "Scheduled · " + event.heartbeat_name : "Scheduled");
        label.title = "Sent on its own, by a scheduled heartbeat";
        meta.insertBefore(label, time);
      }
      var body = el("div", "msg__body");
      body.innerHTML = md.render(event.content);
      node.appendChild(meta);
      node.appendChild(body);
      this.addCopyButtons(node, body, event.content);
      this.renderImages(node, event.attachments, this.sessionId, event.seq);
    }
    this.markAnswer(node, event.answer_state);
    this.markDelivery(node, event.delivery);
    if (event.stopped) this.mark(node, "stopped", "Stopped");
    this.applyFilter(node);
    return node;
  };

  // --- failure marks: an answer that failed, a reply its platform did not get ---

  Chat.prototype.mark = function (node, kind, text) {
    var mark = node.querySelector(":scope > [data-mark='" + kind + "']");
    if (!text) { if (mark) mark.remove(); return; }
    if (!mark) {
      mark = el("div", "msg__mark msg__mark--" + kind);
      mark.setAttribute("data-mark", kind);
      node.appendChild(mark);
    }
    mark.textContent = text;
  };

  Chat.prototype.markAnswer = function (node, state) {
    var self = this;
    if (state) node.setAttribute("data-answer-state", state);
    else node.removeAttribute("data-answer-state");
    node.classList.toggle("msg--answer-failed", state === "failed");
    this.mark(node, "answer", state === "failed" ? "Not answered (the notice below says why)" : "");
    var mark = node.querySelector(":scope > [data-mark='answer']");
    if (mark && this.form) {
      var retry = el("button", "linkbutton msg__retry", "Try again");
      retry.type = "button";
      retry.setAttribute("data-retry", "");
      retry.addEventListener("click", function () { self.command("/retry"); });
      mark.appendChild(document.createTextNode(" "));
      mark.appendChild(retry);
    }
  };

  // --- copying ---

  Chat.prototype.addCopyButtons = function (node, body, text) {
    var self = this;
    var copy = el("button", "msg__copy", "Copy");
    copy.type = "button";
    copy.setAttribute("data-copy", "");
    copy.setAttribute("aria-label", "Copy message");
    copy.addEventListener("click", function () { self.copy(text, copy); });
    node.appendChild(copy);
    body.querySelectorAll("pre").forEach(function (pre) {
      var button = el("button", "code__copy", "Copy code");
      button.type = "button";
      button.setAttribute("data-copy-code", "");
      button.addEventListener("click", function () { self.copy(pre.textContent, button); });
      var wrap = el("div", "code");
      pre.parentNode.insertBefore(wrap, pre);
      wrap.appendChild(pre);
      wrap.appendChild(button);
      pre.tabIndex = 0; // a wide block scrolls with the keyboard too
    });
  };

  Chat.prototype.copy = function (text, button) {
    var done = function (ok) {
      var label = button.textContent;
      button.textContent = ok ? "Copied" : "Press Ctrl+C";
      setTimeout(function () { button.textContent = label; }, 1500);
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(false); });
    } else {
      done(false);
    }
  };

  Chat.prototype.markDelivery = function (node, delivery) {
    var failed = !!delivery && delivery.state === "failed";
    if (failed) node.setAttribute("data-delivery", "failed");
    else node.removeAttribute("data-delivery");
    node.classList.toggle("msg--delivery-failed", failed);
    var platform = failed ? platformName(delivery.platform) : "";
    this.mark(node, "delivery", failed ? "Not delivered" + (platform ? " to " + platform : "") : "");
  };

  // An assistant reply answers its message for good (a failure is a system notice), and
  // the server sends no message.answer for that: mark it here.
  Chat.prototype.onAnswered = function (seq) {
    this.answered.add(seq);
    var node = this.bySeq.get(seq);
    if (node && node.hasAttribute("data-answer-state")) this.markAnswer(node, "answered");
  };

  // `seq` failed (its notice says why), or waits again after /retry.
  Chat.prototype.onAnswer = function (seq, state) {
    if (this.answered.has(seq)) return; // a late event: its answer is here already
    var node = this.bySeq.get(seq);
    if (node) this.markAnswer(node, state);
    if (state === "failed") {
      this.endStream(seq);
    } else if (state === "pending") {
      this.finished.delete(seq); // its retried answer gets a thinking bubble again
      this.expectReply(seq);
    }
  };

  // A voice note was heard: its transcript is the message's text now (the audio stays).
  Chat.prototype.onTranscribed = function (seq, content) {
    var node = this.bySeq.get(seq);
    var body = node && node.querySelector(".msg__body");
    if (body) body.innerHTML = md.render(content);
  };

  Chat.prototype.onDelivery = function (seq, delivery) {
    var node = this.bySeq.get(seq);
    if (node) this.markDelivery(node, delivery);
  };

  Chat.prototype.badge = function (channel) {
    var badge = el("span", "badge badge--" + channel, (this.config.labels || {})[channel] || channel);
    badge.setAttribute("data-badge", channel);
    return badge;
  };

  Chat.prototype.onStream = function (replyTo, text, offset, whole) {
    if (this.finished.has(replyTo)) return;
    var stream = this.streams.get(replyTo);
    if (!stream) {
      var source = this.bySeq.get(replyTo);
      var channel = source ? source.getAttribute("data-channel") : this.config.channel;
      var node = el("article", "msg msg--assistant msg--streaming");
      node.setAttribute("data-reply-to", replyTo);
      node.setAttribute("aria-busy", "true");
      node.setAttribute("aria-label", this.config.qorName + ", writing");
      node.setAttribute("data-channel", channel);
      var meta = el("header", "msg__meta");
      meta.appendChild(el("span", "msg__who", this.config.qorName));
      if (channel !== this.config.channel) meta.appendChild(this.badge(channel));
      node.appendChild(meta);
      node.appendChild(el("div", "msg__body"));
      this.timeline.appendChild(node);
      stream = { node: node, text: "" };
      this.streams.set(replyTo, stream);
      this.applyFilter(node);
      this.updateEmpty();
      this.updateStop();
    }
    if (whole) {
      stream.text = text;
    } else if (typeof offset === "number" && offset !== stream.text.length) {
      if (offset > stream.text.length) return; // the server follows up with the whole text
      stream.text = stream.text.slice(0, offset) + text;
    } else {
      stream.text += text;
    }
    this.paintStream(stream);
    this.afterGrow();
  };

  Chat.prototype.paintStream = function (stream) {
    var self = this;
    if (stream.painting) return;
    stream.painting = true;
    var raf = global.requestAnimationFrame || function (f) { return setTimeout(f, 16); };
    raf(function () {
      stream.painting = false;
      stream.node.querySelector(".msg__body").innerHTML = md.render(stream.text);
      self.afterGrow(); // measured after the paint: one paint may add many lines
    });
  };

  Chat.prototype.endStream = function (replyTo) {
    this.finished.add(replyTo);
    var stream = this.streams.get(replyTo);
    if (stream) { stream.node.remove(); this.streams.delete(replyTo); }
    this.updateStop();
  };

  // --- answering the newest message again ---

  // One Regenerate button, on the newest reply when it answers the newest message and
  // nothing is being written (the server has the last word: 409 otherwise).
  Chat.prototype.updateRegenerate = function () {
    if (!this.config.regenerate || !this.form) return;
    var self = this;
    var old = this.root.querySelector("[data-regenerate]");
    var nodes = this.section.querySelectorAll(".msg[data-seq]");
    var last = nodes.length ? nodes[nodes.length - 1] : null;
    var target = last && last.hasAttribute("data-answers") && !this.streams.size && !this.isSignedOut ? last : null;
    if (old && old.parentNode === target) return;
    if (old) old.remove();
    if (!target) return;
    var button = el("button", "msg__again", "Regenerate");
    button.type = "button";
    button.setAttribute("data-regenerate", "");
    button.setAttribute("aria-label", "Write this answer again");
    button.addEventListener("click", function () { self.regenerate(Number(target.getAttribute("data-answers")), button); });
    target.appendChild(button);
  };

  Chat.prototype.regenerate = function (replyTo, button) {
    var self = this;
    button.disabled = true;
    fetch(this.config.regenerate, {
      method: "POST",
      credentials: "same-origin",
      headers: this.headers({ "Content-Type": "application/json", "X-CSRFToken": this.config.csrfToken || "" }),
      body: JSON.stringify({ reply_to: replyTo }),
    }).then(function (r) {
      button.disabled = false;
      if (r.status === 409) self.flash("Only the newest answer can be written again.");
      else if (!r.ok) self.flash("Could not write the answer again — try again.");
    }).catch(function () {
      button.disabled = false;
      self.flash("Can't reach Qorven — the answer was not written again.");
    });
  };

  // The answer to `replyTo` is being written again: the old one leaves, a new one comes.
  Chat.prototype.onRegenerating = function (replyTo, superseded) {
    var self = this;
    superseded.forEach(function (seq) {
      var node = self.bySeq.get(seq);
      if (node) node.remove();
      self.bySeq.set(seq, null);
    });
    this.answered.delete(replyTo);
    this.finished.delete(replyTo);
    var source = this.bySeq.get(replyTo);
    if (source) this.markAnswer(source, "pending");
    this.expectReply(replyTo);
    this.updateRegenerate();
  };

  // --- stopping a reply while it is written ---

  // The Stop button shows while a reply is on its way (thinking or streaming): the newest.
  Chat.prototype.updateStop = function () {
    if (!this.stopButton || !this.config.stop) return;
    var newest = null;
    this.streams.forEach(function (s, replyTo) { if (newest === null || replyTo > newest) newest = replyTo; });
    this.stopping = newest === null ? null : this.stopping;
    var had = document.activeElement === this.stopButton;
    this.stopButton.hidden = newest === null || this.isSignedOut;
    // aria-disabled, not disabled: a disabled button drops the keyboard's focus to the page.
    var stopping = newest !== null && this.stopping === newest;
    this.stopButton.setAttribute("aria-disabled", stopping ? "true" : "false");
    this.stopButton.textContent = stopping ? "Stopping…" : "Stop";
    if (had && this.stopButton.hidden && this.input && !this.input.disabled) this.input.focus();
    this.stopTarget = newest;
    this.updateRegenerate();
  };

  Chat.prototype.stopReply = function () {
    var self = this;
    var replyTo = this.stopTarget;
    if (replyTo === null || replyTo === undefined || this.stopping === replyTo) return;
    this.stopping = replyTo;
    this.updateStop();
    fetch(this.config.stop, {
      method: "POST",
      credentials: "same-origin",
      headers: this.headers({ "Content-Type": "application/json", "X-CSRFToken": this.config.csrfToken || "" }),
      body: JSON.stringify({ reply_to: replyTo }),
    }).then(function (r) {
      if (r.status === 409) self.endStream(replyTo); // it had finished already: the reply is on its way
      else if (!r.ok) { self.stopping = null; self.updateStop(); self.flash("Could not stop the reply — try again."); }
    }).catch(function () {
      self.stopping = null;
      self.updateStop();
      self.flash("Can't reach Qorven — the reply could not be stopped.");
    });
  };

  // A "thinking" bubble until the first token of the answer to `seq` arrives.
  Chat.prototype.expectReply = function (seq) {
    var self = this;
    if (this.finished.has(seq) || this.streams.has(seq)) return;
    this.onStream(seq, "", 0, true);
    setTimeout(function () {
      var s = self.streams.get(seq);
      if (s && !s.text) { s.node.remove(); self.streams.delete(seq); self.updateStop(); }
    }, 120000);
  };

  // --- filter ---

  Chat.prototype.setFilter = function (channel) {
    var self = this;
    this.filter = channel || "";
    this.root.querySelectorAll("[data-filter]").forEach(function (chip) {
      var on = chip.getAttribute("data-filter") === self.filter;
      chip.classList.toggle("chip--on", on);
      chip.setAttribute("aria-pressed", on ? "true" : "false");
    });
    this.timeline.querySelectorAll(".msg").forEach(function (node) { self.applyFilter(node); });
    this.tidyDividers();
    this.updateEmpty();
    this.scrollToBottom();
    this.fillScreen();
  };

  Chat.prototype.applyFilter = function (node) {
    node.hidden = !!this.filter && node.getAttribute("data-channel") !== this.filter;
  };

  // A day's label shows only while one of that day's messages does (a filter can hide them all).
  Chat.prototype.tidyDividers = function () {
    var divider = null, seen = false;
    var nodes = this.timeline.querySelectorAll(".divider:not(.divider--session), .msg");
    for (var i = 0; i <= nodes.length; i++) {
      var node = nodes[i];
      if (!node || node.classList.contains("divider")) {
        if (divider) divider.hidden = !seen;
        divider = node || null;
        seen = false;
      } else if (!node.hidden) {
        seen = true;
      }
    }
  };

  Chat.prototype.updateEmpty = function () {
    var empty = this.root.querySelector("[data-empty]");
    if (!empty) return;
    var visible = this.timeline.querySelector(".msg:not([hidden])");
    var filtered = this.root.querySelector("[data-empty-filter]");
    if (this.filter && !filtered) {
      filtered = el("div", "empty empty--filter");
      filtered.setAttribute("data-empty-filter", "");
      empty.insertAdjacentElement("afterend", filtered);
    }
    if (filtered) {
      var label = (this.config.labels || {})[this.filter] || this.filter;
      filtered.textContent = "No " + label + " messages in this conversation" + (this.more ? " on this page." : " yet.");
      filtered.hidden = !this.filter || !!visible;
    }
    empty.hidden = !!visible || this.more || !!this.filter;
  };

  // --- history ---

  Chat.prototype.loadOlder = function () {
    var self = this;
    if (!this.more || this.loadingOlder || this.sessionId === null || this.oldestSeq === null) return;
    this.loadingOlder = true;
    if (this.older) this.older.hidden = false;
    var url = this.config.messages + "?session=" + this.sessionId + "&before_seq=" + this.oldestSeq;
    fetch(url, { headers: this.headers(), credentials: "same-origin" })
      .then(function (r) {
        if (r.status === 401 && self.config.signIn) { self.signedOut(); throw new Error("signed out"); }
        return bodyOf(r).then(function (body) {
          if (!body.json || !r.ok) throw new Error(body.data.error || String(r.status));
          return body.data;
        });
      })
      .then(function (data) {
        if (data.session_id !== self.sessionId) return;
        var before = self.scroller.scrollHeight;
        var top = self.scroller.scrollTop;
        var messages = data.messages || [];
        self.prepend(messages);
        self.more = !!data.more && messages.length > 0;
        if (self.filter) self.tidyDividers();
        var added = self.scroller.scrollHeight - before;
        self.scroller.scrollTop = top + added;
        // Where we last put the bottom moved down with everything else: the reader's new
        // scrollTop past the old mark is still the reader up here, not back at the bottom
        // (a reply streaming meanwhile took them down to it).
        self.autoScrollTop += added;
      })
      .catch(function () {})
      .then(function () {
        self.loadingOlder = false;
        if (self.older) self.older.hidden = !self.more;
        self.updateEmpty();
        self.fillScreen();
      });
  };

  Chat.prototype.prepend = function (messages) {
    var first = this.section.firstChild;
    var fragment = document.createDocumentFragment();
    var day = null;
    for (var i = 0; i < messages.length; i++) {
      var event = messages[i];
      if (this.bySeq.has(event.seq)) continue;
      if (event.seq < this.oldestSeq) this.oldestSeq = event.seq;
      if (event.hidden) { this.bySeq.set(event.seq, null); continue; }
      var date = new Date(event.created_at);
      if (date.toDateString() !== day) {
        day = date.toDateString();
        fragment.appendChild(el("div", "divider", dayLabel(date)));
      }
      var node = this.renderMessage(event);
      this.bySeq.set(event.seq, node);
      fragment.appendChild(node);
    }
    // The old first day label repeats the last day of the new page: drop it.
    if (first && first.classList && first.classList.contains("divider") && day === this.firstDay) first.remove();
    if (day) this.firstDay = this.firstDay || day;
    this.section.insertBefore(fragment, this.section.firstChild);
    if (messages.length) this.firstDay = new Date(messages[0].created_at).toDateString();
  };

  // With a filter on, a page may show nothing: keep loading until the view is full.
  Chat.prototype.fillScreen = function () {
    var self = this;
    if (this.more && !this.loadingOlder && this.scroller.scrollHeight <= this.scroller.clientHeight + 120) {
      setTimeout(function () { self.loadOlder(); }, 0);
    }
  };

  // --- sending ---

  Chat.prototype.headers = function (extra) {
    var headers = Object.assign({ "Accept": "application/json" }, extra || {});
    return this.config.authHeaders ? Object.assign(headers, this.config.authHeaders()) : headers;
  };

  // What Enter (or Send) takes from the box leaves it at once, shown as sending. One
  // message is on its way at a time and the next goes once the server has taken it, so
  // messages typed quickly arrive in the order they were written, each once.
  Chat.prototype.submit = function () {
    var content = this.input.value;
    var images = (this.attached || []).slice();
    if ((!content.trim() && !images.length) || this.isSignedOut) return;
    // What you send (and its answer) must not vanish behind another channel's filter.
    if (this.filter && this.filter !== this.config.channel) this.setFilter("");
    var pending = el("article", "msg msg--user msg--pending");
    pending.setAttribute("data-channel", this.config.channel);
    var body = el("div", "msg__body");
    body.innerHTML = md.render(content);
    pending.setAttribute("aria-label", "You, sending");
    pending.appendChild(el("header", "msg__meta")).appendChild(el("span", "msg__who", "Sending…"));
    pending.appendChild(body);
    if (images.length) {
      var strip = el("div", "msg__images");
      images.forEach(function (a) {
        if (a.file.type.indexOf("image/") !== 0) { strip.appendChild(el("span", "msg__file", a.file.name || "file")); return; }
        var img = el("img", "msg__image"); img.src = a.url; img.alt = a.file.name || "image"; strip.appendChild(img);
      });
      pending.appendChild(strip);
    }
    this.timeline.appendChild(pending);
    this.input.value = "";
    this.setAttached([]);
    this.autosize();
    this.scrollToBottom();
    this.outbox.push({ node: pending, content: content, images: images, channel: this.config.channel });
    if (!this.sending) this.sendNext();
  };

  // A 503 (the server busy, its database away) or a 429 (too many at once) that says when
  // to come back (Retry-After; a 503 that does not, in SEND_WAIT_DEFAULT) is waited out and
  // the message sent again by itself, SEND_TRIES times in all: the same client_id each time,
  // so one the server did store before the 503 (a proxy's, after a timeout) is stored once.
  var SEND_TRIES = 4;
  var SEND_WAIT_DEFAULT = 2; // seconds
  var SEND_WAIT_MAX = 60; // seconds: told to wait longer, the messages go back to the box

  // Seconds to wait before sending `res`'s message again, or null: not to send it again.
  function sendWait(res) {
    if (res.status !== 503 && res.status !== 429) return null;
    var header = (res.retryAfter || "").trim(), seconds = null;
    if (/^\d+$/.test(header)) {
      seconds = parseInt(header, 10);
    } else if (header && !isNaN(Date.parse(header))) {
      seconds = Math.ceil((Date.parse(header) - Date.now()) / 1000);
    } else if (res.status === 503) {
      seconds = SEND_WAIT_DEFAULT;
    }
    if (seconds === null || seconds > SEND_WAIT_MAX) return null;
    return Math.max(1, seconds);
  }

  Chat.prototype.sendNext = function () {
    var self = this;
    var item = this.outbox.shift();
    if (!item) return;
    this.sending = true;
    this.pendingSend = item;
    var content = item.content, images = item.images, pending = item.node;
    item.clientId = item.clientId || Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
    item.tries = (item.tries || 0) + 1;
    var clientId = item.clientId;
    var extra = { "X-CSRFToken": this.config.csrfToken || "" };
    var payload;
    if (images.length) {
      payload = new FormData();
      payload.append("content", content);
      payload.append("client_id", clientId);
      images.forEach(function (a) { payload.append("image", a.file, a.file.name || "image"); });
    } else {
      extra["Content-Type"] = "application/json";
      payload = JSON.stringify({ content: content, client_id: clientId });
    }
    // A refusal is the frame's to judge (config.onRefused): when it renewed the visitor's
    // token, the message goes again, once, with the fresh one.
    var post = function (again) {
      return fetch(self.config.messages, { method: "POST", credentials: "same-origin", headers: self.headers(extra), body: payload })
        .then(function (r) {
          return bodyOf(r).then(function (body) {
            return { ok: r.ok && body.json, status: r.status, data: body.data, retryAfter: r.headers.get("Retry-After") };
          });
        })
        .then(function (res) {
          if (res.ok || again || !self.config.onRefused) return res;
          return Promise.resolve(self.config.onRefused(res.data, "send")).then(function (next) {
            return next === "renewed" ? post(true) : res;
          });
        });
    };
    post(false)
      .then(function (res) {
        var wait = !res.ok && item.tries < SEND_TRIES ? sendWait(res) : null;
        if (wait !== null) {
          self.waitToSend(item, wait);
          return "waiting";
        }
        pending.remove();
        self.pendingSend = null;
        if (res.status === 401 && self.config.signIn) {
          self.signedOut();
          throw new Error("You are signed out: sign in again, then send it.");
        }
        if (!res.ok) throw new Error(res.data.error || "could not send");
        if (self.config.onSent) self.config.onSent(res.data);
        if (res.data.session_id !== self.sessionId) {
          // The first message of a new chat: the socket follows the new session.
          if (self.sessionId === null || !self.socket) { self.connect(true); }
        } else {
          self.onMessage(res.data.message, true);
        }
        if (!res.data.message.content.trim().startsWith("/")) self.expectReply(res.data.message.seq);
        images.forEach(function (a) { URL.revokeObjectURL(a.url); });
        return true;
      })
      .catch(function (err) {
        pending.remove();
        self.pendingSend = null;
        self.giveBack([item].concat(self.outbox.splice(0)));
        // fetch's own TypeError ("Failed to fetch") means the server could not be reached.
        var unreachable = err instanceof TypeError;
        self.flash(unreachable || !err.message
          ? "Can't reach Qorven — check the connection; your message is back in the box to send again."
          : err.message);
        return false;
      })
      .then(function (sent) {
        if (sent === "waiting") return; // still sending: what is typed meanwhile waits behind it
        self.sending = false;
        if (self.isSignedOut) return;
        self.input.focus();
        if (sent) self.sendNext();
      });
  };

  // The server said when to come back: `item` goes first again once `seconds` are up, and
  // it and the messages behind it say so meanwhile. It stays pendingSend: the socket may
  // show it stored (a 503 that came after storing it), and the send again is answered with
  // that same message.
  Chat.prototype.waitToSend = function (item, seconds) {
    var self = this;
    var left = seconds;
    this.outbox.unshift(item);
    var mark = function () {
      var words = "Waiting — sending again in " + left + " s";
      self.outbox.forEach(function (waiting) {
        waiting.node.classList.add("msg--waiting");
        waiting.node.setAttribute("aria-label", "You, waiting to send");
        waiting.node.querySelector(".msg__who").textContent = words;
      });
    };
    mark();
    this.flash("The server is busy; sending again in " + seconds + " s.");
    var tick = setInterval(function () {
      left -= 1;
      if (left > 0) { mark(); return; }
      clearInterval(tick);
      self.outbox.forEach(function (waiting) {
        waiting.node.classList.remove("msg--waiting");
        waiting.node.setAttribute("aria-label", "You, sending");
        waiting.node.querySelector(".msg__who").textContent = "Sending…";
      });
      self.sendNext();
    }, 1000);
  };

  // Messages that did not go (the one refused and those waiting behind it) go back to the
  // box, in the order written and before anything typed since, with their attachments
  // back in the tray: nothing typed is lost, and none goes out of its order.
  Chat.prototype.giveBack = function (items) {
    var texts = [], images = [];
    items.forEach(function (item) {
      item.node.remove();
      if (item.content.trim()) texts.push(item.content);
      images = images.concat(item.images);
    });
    if (this.input.value.trim()) texts.push(this.input.value);
    this.input.value = texts.join("\n\n");
    if (images.length) this.setAttached(images.concat(this.attached || []));
    this.autosize();
  };

  // --- attaching images ---

  var ATTACH_MAX = 4;
  var ATTACH_TYPES = ["image/jpeg", "image/png", "image/gif", "image/webp", "application/pdf", "text/plain", "text/markdown",
    "audio/ogg", "audio/opus", "audio/mpeg", "audio/mp3", "audio/wav", "audio/x-wav", "audio/wave", "audio/mp4",
    "audio/x-m4a", "audio/m4a", "audio/aac", "audio/webm", "video/webm"];

  Chat.prototype.attach = function (files) {
    var self = this;
    var next = (this.attached || []).slice();
    files.forEach(function (file) {
      if (file.type && ATTACH_TYPES.indexOf(file.type) < 0) { self.flash(file.name + " is not an image (JPEG, PNG, GIF, WebP), a PDF, a text file or audio."); return; }
      if (self.config.maxUpload && file.size > self.config.maxUpload) {
        self.flash(file.name + " is larger than " + Math.round(self.config.maxUpload / 1048576) + " MB."); return;
      }
      if (next.length >= ATTACH_MAX) { self.flash("Attach at most " + ATTACH_MAX + " images to one message."); return; }
      next.push({ file: file, url: URL.createObjectURL(file) });
    });
    this.setAttached(next);
  };

  Chat.prototype.setAttached = function (list) {
    var self = this;
    this.attached = list;
    if (!this.tray) return;
    this.tray.textContent = "";
    this.tray.hidden = !list.length;
    list.forEach(function (a, i) {
      var chip = el("div", "attachment");
      chip.setAttribute("data-attachment", "");
      if (a.file.type.indexOf("image/") === 0) {
        var img = el("img");
        img.src = a.url;
        img.alt = a.file.name || "image";
        chip.appendChild(img);
      } else {
        chip.appendChild(el("span", "attachment__file", a.file.name || "file"));
      }
      var remove = el("button", "attachment__remove", "×");
      remove.type = "button";
      remove.setAttribute("aria-label", "Remove " + (a.file.name || "image"));
      remove.addEventListener("click", function () {
        URL.revokeObjectURL(a.url);
        self.setAttached(self.attached.filter(function (_, j) { return j !== i; }));
      });
      chip.appendChild(remove);
      self.tray.appendChild(chip);
    });
  };

  // A message's images, read with this surface's credentials (the webchat's visitor token
  // is a header an <img> cannot send), as thumbnails that open full size.
  Chat.prototype.renderImages = function (node, attachments, sessionId, seq) {
    if (!attachments || !attachments.length || !this.config.images || sessionId === null || sessionId === undefined) return;
    var self = this;
    var strip = el("div", "msg__images");
    attachments.forEach(function (a, i) {
      var url = self.config.images + sessionId + "/" + seq + "/" + i;
      if (a.type === "file") { // a PDF or a text file: a link that downloads it
        var file = el("a", "msg__file", (a.name || "file") + " · " + Math.max(1, Math.round((a.size || 0) / 1024)) + " KB");
        file.setAttribute("data-file", "");
        file.download = a.name || "file";
        strip.appendChild(file);
        fetch(url, { headers: self.headers(), credentials: "same-origin" })
          .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.blob(); })
          .then(function (blob) { file.href = URL.createObjectURL(blob); })
          .catch(function () { file.replaceWith(el("span", "msg__image msg__image--gone", (a.name || "File") + " no longer kept")); });
        return;
      }
      if (a.type === "audio") { // a voice note: its transcript is the message's text
        var player = el("audio", "msg__audio");
        player.controls = true;
        player.setAttribute("aria-label", "Voice note");
        strip.appendChild(player);
        fetch(url, { headers: self.headers(), credentials: "same-origin" })
          .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.blob(); })
          .then(function (blob) { player.src = URL.createObjectURL(blob); })
          .catch(function () { player.replaceWith(el("span", "msg__image msg__image--gone", "Voice note no longer kept")); });
        return;
      }
      var link = el("a", "msg__imagelink");
      link.target = "_blank";
      link.rel = "noopener";
      var img = el("img", "msg__image");
      img.alt = "Image " + (i + 1) + " of " + attachments.length;
      img.setAttribute("data-image", "");
      link.appendChild(img);
      strip.appendChild(link);
      fetch(url, { headers: self.headers(), credentials: "same-origin" })
        .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.blob(); })
        .then(function (blob) { var shown = URL.createObjectURL(blob); img.src = shown; link.href = shown; })
        .catch(function () { link.replaceWith(el("span", "msg__image msg__image--gone", "Image no longer kept")); });
    });
    node.insertBefore(strip, node.querySelector(":scope > .msg__copy"));
  };

  Chat.prototype.flash = function (text) {
    var note = el("div", "msg msg--notice msg--error", text);
    note.setAttribute("role", "alert");
    this.timeline.appendChild(note);
    this.scrollToBottom();
    setTimeout(function () { note.remove(); }, 8000);
  };

  // The box grows with its text up to 200 px, and only then scrolls: its borders count
  // in its height (border-box), so they are added to what the text needs.
  Chat.prototype.autosize = function () {
    var input = this.input;
    input.style.height = "auto";
    var borders = input.offsetHeight - input.clientHeight;
    var needed = input.scrollHeight + borders;
    input.style.height = Math.min(needed, 200) + "px";
    input.style.overflowY = needed > 200 ? "auto" : "hidden";
  };

  // --- scrolling ---

  Chat.prototype.nearBottom = function () {
    var s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  };

  Chat.prototype.scrollToBottom = function () {
    this.scroller.scrollTop = this.scroller.scrollHeight;
    this.autoScrollTop = this.scroller.scrollTop;
    this.pinned = true;
    if (this.jump) this.jump.hidden = true;
  };

  // After the timeline grew: follow it if the reader is at the bottom, else offer a jump.
  Chat.prototype.afterGrow = function () {
    if (this.pinned) this.scrollToBottom();
    else if (this.jump) this.jump.hidden = false;
  };

  Chat.prototype.start = function () {
    this.connect();
    if (this.input) this.input.focus();
  };

  global.QorvenChat = Chat;
})(window);
