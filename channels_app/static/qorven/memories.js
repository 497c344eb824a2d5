/* The chat page's Memories dialog: what the Qor remembers about the signed-in person,
 * newest first, a page at a time, each with a Forget button that asks on the spot, then
 * deletes (config.memories: GET a page, `?before=<id>` the next; DELETE `<id>`).
 * No dependencies, no build step. A memory's text only ever reaches the DOM as
 * textContent: whatever it holds, it is shown, never run. */
(function (global) {
  "use strict";

  var KINDS = { fact: "Fact", summary: "Summary", lesson: "Lesson", reminder: "Reminder",
    conversation_digest: "Conversation digest" };

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function day(iso) {
    return new Date(iso).toLocaleDateString(undefined, { dateStyle: "medium" });
  }

  // A memory in a few words, to name its Forget button ("Forget: Alice moved to Lyon.").
  function gist(text, limit) {
    var flat = text.replace(/\s+/g, " ").trim();
    return flat.length > limit ? flat.slice(0, limit).replace(/\s+\S*$/, "") + "…" : flat;
  }

  function Memories(chat, opener) {
    var self = this;
    this.chat = chat;
    this.opener = opener;
    this.dialog = chat.root.querySelector("[data-memories]");
    this.body = this.dialog.querySelector("[data-memories-body]");
    this.title = this.dialog.querySelector("[data-memories-title]");
    this.generation = 0; // a response for a dialog closed (or opened again) since is dropped
    opener.addEventListener("click", function () { self.open(); });
    this.dialog.querySelector("[data-memories-close]").addEventListener("click", function () { self.dialog.close(); });
    this.dialog.addEventListener("close", function () {
      self.generation += 1;
      self.opener.focus({ preventScroll: true }); // Safari does not give it back by itself
    });
  }

  Memories.prototype.open = function () {
    this.generation += 1;
    this.total = 0;
    this.more = false;
    this.oldestId = null;
    this.asking = null;
    this.notice(null);
    this.body.textContent = "";
    this.body.appendChild(el("p", "archive__none", "Loading…"));
    if (!this.dialog.open) {
      this.dialog.showModal();
      this.chat.lendAnnouncer(this.dialog);
    }
    this.load(null);
  };

  // One page of memories (the newest, or those older than `this.oldestId` for `moreButton`).
  Memories.prototype.load = function (moreButton) {
    var self = this;
    var generation = this.generation;
    var chat = this.chat;
    var url = chat.config.memories + (moreButton ? "?before=" + this.oldestId : "");
    if (moreButton) moreButton.setAttribute("aria-disabled", "true");
    fetch(url, { headers: chat.headers(), credentials: "same-origin" })
      .then(function (r) {
        if (r.status === 401 && chat.config.signIn) chat.signedOut();
        if (!r.ok) throw new Error(String(r.status));
        return r.json();
      })
      .then(function (data) {
        if (generation !== self.generation) return;
        self.notice(null);
        self.show(data, !!moreButton);
      })
      .catch(function (err) {
        if (generation !== self.generation) return;
        if (moreButton) moreButton.removeAttribute("aria-disabled");
        else self.body.textContent = "";
        // fetch's own TypeError means the server could not be reached.
        self.notice(err instanceof TypeError
          ? "Can't reach Qorven — try again in a moment."
          : "Qorven could not read the memories just now; try again in a moment.");
      });
  };

  Memories.prototype.show = function (data, older) {
    var self = this;
    if (!older) {
      this.body.textContent = "";
      this.count = el("p", "archive__count memories__count");
      this.count.setAttribute("data-memories-count", "");
      this.list = el("ul", "memories__list");
      this.body.appendChild(this.count);
      this.body.appendChild(this.list);
    }
    this.total = data.total;
    this.more = !!data.more && data.memories.length > 0;
    var first = null;
    data.memories.forEach(function (memory) {
      if (self.oldestId === null || memory.id < self.oldestId) self.oldestId = memory.id;
      if (self.list.querySelector("[data-memory='" + memory.id + "']")) return; // shown already
      var item = self.item(memory);
      first = first || item;
      self.list.appendChild(item);
    });
    this.update();
    if (older) this.focus(first ? first.querySelector("[data-forget]") : this.moreButton || this.title);
  };

  Memories.prototype.item = function (memory) {
    var self = this;
    var item = el("li", "memory");
    item.setAttribute("data-memory", memory.id);
    var meta = el("p", "memory__meta");
    meta.appendChild(el("span", "memory__kind", KINDS[memory.type] || memory.type));
    meta.appendChild(document.createTextNode(" · "));
    var said = memory.said_at || memory.created_at;  // when it was said, as /memories dates it
    var when = el("time", "memory__when", day(said));
    when.dateTime = said;
    meta.appendChild(when);
    if (memory.type === "reminder" && memory.period_start) {
      meta.appendChild(document.createTextNode(" · due " + new Date(memory.period_start).toLocaleString(
        undefined, { dateStyle: "medium", timeStyle: "short" })));
    } else if (memory.period_start && memory.period_end) {
      var from = day(memory.period_start), to = day(memory.period_end);
      meta.appendChild(document.createTextNode(" · covers " + (from === to ? from : from + " – " + to)));
    }
    item.appendChild(meta);
    item.appendChild(el("p", "memory__text", memory.content));
    var actions = el("div", "memory__actions");
    var forget = el("button", "linkbutton", "Forget");
    forget.type = "button";
    forget.setAttribute("data-forget", "");
    forget.setAttribute("aria-label", "Forget: " + gist(memory.content, 80));
    forget.addEventListener("click", function () { self.ask(item, memory); });
    actions.appendChild(forget);
    item.appendChild(actions);
    return item;
  };

  // The count, the Show older button and the empty state, after the list changed.
  Memories.prototype.update = function () {
    var self = this;
    var shown = this.list.children.length;
    this.count.hidden = !shown;
    this.count.textContent = this.total + (this.total === 1 ? " memory" : " memories") + ", newest first";
    if (this.more && !this.moreButton) {
      this.moreButton = el("button", "linkbutton archive__more", "Show older");
      this.moreButton.type = "button";
      this.moreButton.setAttribute("data-memories-more", "");
      this.moreButton.addEventListener("click", function () {
        if (this.getAttribute("aria-disabled") !== "true") self.load(this);
      });
      this.body.appendChild(this.moreButton);
    } else if (this.moreButton) {
      this.moreButton.removeAttribute("aria-disabled");
      if (!this.more) { this.moreButton.remove(); this.moreButton = null; }
    }
    var empty = this.body.querySelector("[data-memories-empty]");
    if (!shown && !this.more && !empty) {
      empty = el("p", "archive__none", this.chat.config.qorName + " remembers nothing about you yet.");
      empty.setAttribute("data-memories-empty", "");
      this.body.appendChild(empty);
    }
  };

  // Forget? asked in the memory itself; Keep it (or Escape) takes the question back.
  Memories.prototype.ask = function (item, memory) {
    var self = this;
    if (this.asking) this.keep(false);
    var forget = item.querySelector("[data-forget]");
    var ask = el("div", "memory__confirm");
    ask.setAttribute("role", "group");
    var question = el("span", "memory__question", "Forget this for good?");
    question.id = "memory-question-" + memory.id;
    ask.setAttribute("aria-labelledby", question.id);
    var yes = el("button", "linkbutton memory__yes", "Yes, forget it");
    yes.type = "button";
    yes.setAttribute("data-forget-confirm", "");
    var keep = el("button", "linkbutton", "Keep it");
    keep.type = "button";
    keep.setAttribute("data-forget-cancel", "");
    ask.appendChild(question);
    ask.appendChild(yes);
    ask.appendChild(keep);
    yes.addEventListener("click", function () { self.forget(item, memory, yes); });
    keep.addEventListener("click", function () { self.keep(true); });
    ask.addEventListener("keydown", function (e) {
      if (e.key !== "Escape") return;
      e.preventDefault(); // the question goes, not the whole dialog
      e.stopPropagation();
      self.keep(true);
    });
    forget.hidden = true;
    forget.parentNode.appendChild(ask);
    item.classList.add("memory--asking");
    this.asking = { item: item, ask: ask, forget: forget };
    yes.focus();
  };

  Memories.prototype.keep = function (focus) {
    var asking = this.asking;
    if (!asking) return;
    this.asking = null;
    asking.ask.remove();
    asking.item.classList.remove("memory--asking");
    asking.forget.hidden = false;
    if (focus) asking.forget.focus();
  };

  Memories.prototype.forget = function (item, memory, yes) {
    var self = this;
    var chat = this.chat;
    var generation = this.generation;
    if (yes.getAttribute("aria-disabled") === "true") return;
    yes.setAttribute("aria-disabled", "true"); // not disabled: that would drop the keyboard's focus
    yes.textContent = "Forgetting…";
    fetch(chat.config.memories + "/" + memory.id, {
      method: "DELETE",
      credentials: "same-origin",
      headers: chat.headers({ "X-CSRFToken": chat.config.csrfToken || "" }),
    }).then(function (r) {
      if (r.ok) return "forgotten";
      if (r.status === 401 && chat.config.signIn) { chat.signedOut(); return "failed"; }
      if (r.status !== 404) return "failed";
      // Gone already (forgotten elsewhere), unless the chat itself is what is missing.
      return r.json().then(function (body) { return body.error === "no such memory" ? "gone" : "failed"; },
        function () { return "failed"; });
    }, function () {
      return "unreachable";
    }).then(function (outcome) {
      if (generation !== self.generation) { // closed meanwhile: the list is read afresh next time
        if (outcome === "forgotten") chat.say("Forgotten");
        return;
      }
      if (outcome === "forgotten" || outcome === "gone") {
        self.notice(outcome === "gone" ? "That memory was already forgotten." : null);
        self.remove(item);
        if (outcome === "forgotten") chat.say("Forgotten");
        return;
      }
      if (self.asking && self.asking.item === item) self.keep(true); // else asked about another meanwhile
      self.notice(outcome === "unreachable"
        ? "Can't reach Qorven — the memory was not forgotten; try again in a moment."
        : "Qorven could not forget that just now; try again in a moment.");
    });
  };

  // The memory leaves the list; the focus goes to the next one's Forget button (else Show
  // older, else the one before), or to the heading when none is left.
  Memories.prototype.remove = function (item) {
    if (this.asking && this.asking.item === item) this.asking = null;
    var active = document.activeElement;
    var moved = active && active !== document.body && !item.contains(active) && this.dialog.contains(active);
    var next = item.nextElementSibling, before = item.previousElementSibling;
    item.remove();
    this.total = Math.max(0, this.total - 1);
    this.update();
    var target = next ? next.querySelector("[data-forget]")
      : this.moreButton || (before ? before.querySelector("[data-forget]") : null);
    if (!moved) this.focus(target || this.title); // not away from where the reader went meanwhile
  };

  Memories.prototype.focus = function (target) {
    if (target) target.focus();
  };

  // One short notice of ours at the top of the dialog (the page's own are behind it), said
  // at once by a screen reader; null takes it away.
  Memories.prototype.notice = function (text) {
    var old = this.dialog.querySelector("[data-memories-notice]");
    if (old) old.remove();
    if (!text) return;
    var note = el("div", "msg msg--notice msg--error memories__notice", text);
    note.setAttribute("role", "alert");
    note.setAttribute("data-memories-notice", "");
    this.dialog.insertBefore(note, this.body);
  };

  global.QorvenMemories = Memories;
})(window);
