/* The person's own timezone on the chat page: the dates the Qor writes follow it, while
 * the page shows times in the browser's zone. A browser in another zone than the one in
 * force is offered it once (config.zoneOwn empty), taken in one click or dismissed for
 * good (remembered in this browser, per workspace and zone); "Your timezone" in the
 * header shows theirs and changes it in a dialog. Both go through config.timezone (GET;
 * PUT {"timezone"}, "" for the workspace's), whose answers are /timezone's own words.
 * No dependencies, no build step; what the server says reaches the DOM as text only. */
(function (global) {
  "use strict";

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function browserZone() {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { return ""; }
  }

  // Whether two zones tell the same time all year (an alias: Asia/Calcutta, Asia/Kolkata);
  // a zone this browser does not know is compared by its name.
  function sameClock(a, b) {
    if (a === b) return true;
    try {
      var year = new Date().getFullYear();
      var options = { year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "numeric", hourCycle: "h23" };
      var fa = new Intl.DateTimeFormat("en-US", Object.assign({ timeZone: a }, options));
      var fb = new Intl.DateTimeFormat("en-US", Object.assign({ timeZone: b }, options));
      for (var month = 0; month < 12; month += 1) {
        var when = new Date(Date.UTC(year, month, 15, 12));
        if (fa.format(when) !== fb.format(when)) return false;
      }
      return fa.format(new Date()) === fb.format(new Date());
    } catch (e) {
      return false;
    }
  }

  // "Tue 14:05" in `zone`, or "" when this browser does not know it.
  function nowIn(zone) {
    try {
      return new Date().toLocaleString(undefined, { timeZone: zone, weekday: "short", hour: "2-digit", minute: "2-digit" });
    } catch (e) {
      return "";
    }
  }

  function Timezone(chat) {
    var self = this;
    var config = chat.config;
    this.chat = chat;
    this.url = config.timezone;
    this.own = config.zoneOwn || "";
    this.workspace = config.zoneWorkspace || "UTC";
    this.browser = browserZone();
    this.key = "qorven.zoneOffer." + config.tenant; // the browser zone whose offer was dismissed
    var root = chat.root;
    this.opener = root.querySelector("[data-zone-open]");
    this.offer = root.querySelector("[data-zone-offer]");
    this.dialog = root.querySelector("[data-zone]");
    this.input = this.dialog.querySelector("[data-zone-input]");
    this.list = this.dialog.querySelector("[data-zone-list]");
    this.said = this.dialog.querySelector("[data-zone-said]");
    this.generation = 0; // an answer for a dialog closed (or opened again) since is dropped
    this.opener.addEventListener("click", function () { self.open(); });
    this.dialog.querySelector("[data-zone-close]").addEventListener("click", function () { self.dialog.close(); });
    this.dialog.addEventListener("close", function () {
      self.generation += 1;
      if (self.opener.offsetParent !== null) self.opener.focus({ preventScroll: true });
    });
    this.dialog.querySelector("[data-zone-form]").addEventListener("submit", function (e) {
      e.preventDefault();
      var asked = self.input.value.trim();
      if (!asked) { self.refused("Type a timezone, such as Europe/Paris."); return; }
      self.set(asked, "dialog");
    });
    this.dialog.querySelector("[data-zone-browser]").addEventListener("click", function () { self.set(self.browser, "dialog"); });
    this.dialog.querySelector("[data-zone-workspace]").addEventListener("click", function () { self.set("", "dialog"); });
    this.offer.querySelector("[data-zone-offer-use]").addEventListener("click", function () { self.set(self.browser, "offer"); });
    this.offer.querySelector("[data-zone-offer-dismiss]").addEventListener("click", function () { self.dismiss(); });
    this.offer.querySelector("[data-zone-offer-done]").addEventListener("click", function () { self.closeOffer(); });
    this.maybeOffer();
  }

  Timezone.prototype.zone = function () { return this.own || this.workspace; };

  // --- the offer ---

  Timezone.prototype.maybeOffer = function () {
    if (this.own || !this.browser || sameClock(this.browser, this.workspace)) return;
    try { if (localStorage.getItem(this.key) === this.browser) return; } catch (e) {}
    var text = this.offer.querySelector("[data-zone-offer-text]");
    text.textContent = this.chat.config.qorName + " writes dates and reminders in " + this.workspace +
      ", the workspace's timezone; this browser is in " + this.browser + ".";
    this.offer.querySelector("[data-zone-offer-use]").textContent = "Use " + this.browser;
    this.offer.hidden = false;
  };

  Timezone.prototype.dismiss = function () {
    try { localStorage.setItem(this.key, this.browser); } catch (e) {}
    this.closeOffer();
  };

  Timezone.prototype.closeOffer = function () {
    var inside = this.offer.contains(document.activeElement);
    this.offer.hidden = true;
    if (inside && this.chat.input) this.chat.input.focus();
  };

  // The server's answer (or refusal) in the offer's place; "OK" puts it away.
  Timezone.prototype.offerSays = function (text, ok) {
    var words = this.offer.querySelector("[data-zone-offer-text]");
    words.textContent = text;
    this.offer.classList.toggle("zone-offer--refused", !ok);
    if (!ok) return;
    this.offer.querySelector("[data-zone-offer-use]").hidden = true;
    this.offer.querySelector("[data-zone-offer-dismiss]").hidden = true;
    var done = this.offer.querySelector("[data-zone-offer-done]");
    done.hidden = false;
    done.focus();
  };

  // --- the dialog ---

  Timezone.prototype.open = function () {
    var self = this;
    var chat = this.chat;
    this.generation += 1;
    var generation = this.generation;
    this.notice(null);
    this.said.hidden = true;
    this.input.removeAttribute("aria-invalid");
    this.input.value = this.own;
    this.input.placeholder = this.workspace;
    this.show();
    if (!this.dialog.open) {
      this.dialog.showModal();
      chat.lendAnnouncer(this.dialog);
    }
    if (this.list.options.length) return;
    fetch(this.url, { headers: chat.headers(), credentials: "same-origin" })
      .then(function (r) {
        if (r.status === 401 && chat.config.signIn) chat.signedOut();
        if (!r.ok) throw new Error(String(r.status));
        return r.json();
      })
      .then(function (data) {
        var options = document.createDocumentFragment();
        (data.zones || []).forEach(function (name) {
          var option = document.createElement("option");
          option.value = name;
          options.appendChild(option);
        });
        self.list.appendChild(options);
        if (generation !== self.generation) return;
        self.own = data.timezone || "";
        self.workspace = data.workspace || self.workspace;
        self.show();
      })
      .catch(function () {
        // Typing a name still works without the list to pick from.
        if (generation === self.generation) self.notice("Qorven could not list the timezones just now; type one, such as Europe/Paris.");
      });
  };

  // The dialog and the header's item after the zone in force is known (or changed).
  Timezone.prototype.show = function () {
    var zone = this.zone();
    var now = nowIn(zone);
    this.dialog.querySelector("[data-zone-now]").textContent = zone + (this.own ? ", your own" : ", the workspace's") +
      (now ? " — it is " + now + " there." : ".");
    var mine = this.dialog.querySelector("[data-zone-browser]");
    mine.hidden = !this.browser || this.browser === zone;
    mine.textContent = "Use this browser's: " + this.browser;
    var workspace = this.dialog.querySelector("[data-zone-workspace]");
    workspace.hidden = !this.own;
    workspace.textContent = "Follow the workspace's: " + this.workspace;
    var full = "Your timezone: " + zone + (this.own ? "" : " (the workspace's)");
    this.opener.setAttribute("aria-label", full);
    this.opener.querySelector("[data-zone-short]").textContent = zone.split("/").pop().replace(/_/g, " ");
    this.opener.querySelector("[data-zone-full]").textContent = full;
  };

  // A refusal of ours at the top of the dialog, said at once; null takes it away.
  Timezone.prototype.notice = function (text) {
    var old = this.dialog.querySelector("[data-zone-notice]");
    if (old) old.remove();
    if (!text) return;
    var note = el("p", "msg msg--notice msg--error zone__notice", text);
    note.id = "zone-notice";
    note.setAttribute("role", "alert");
    note.setAttribute("data-zone-notice", "");
    this.input.closest("form").appendChild(note);
  };

  Timezone.prototype.refused = function (text) {
    this.said.hidden = true;
    this.notice(text);
    this.input.setAttribute("aria-invalid", "true");
    this.input.setAttribute("aria-describedby", "zone-notice");
    this.input.focus();
  };

  // --- setting it ---

  // PUT `asked` ("" for the workspace's) from the offer or the dialog, and show the answer there.
  Timezone.prototype.set = function (asked, from) {
    var self = this;
    var chat = this.chat;
    if (this.busy) return;
    this.busy = true;
    fetch(this.url, {
      method: "PUT",
      credentials: "same-origin",
      headers: chat.headers({ "Content-Type": "application/json", "X-CSRFToken": chat.config.csrfToken || "" }),
      body: JSON.stringify({ timezone: asked }),
    }).then(function (r) {
      if (r.status === 401 && chat.config.signIn) chat.signedOut();
      var json = (r.headers.get("Content-Type") || "").indexOf("application/json") !== -1;
      return (json ? r.json() : Promise.resolve({})).then(function (data) { return { ok: r.ok, status: r.status, data: data }; },
        function () { return { ok: false, status: r.status, data: {} }; });
    }, function () {
      return { ok: false, status: 0, data: { error: "Can't reach Qorven — your timezone was not changed; try again in a moment." } };
    }).then(function (res) {
      self.busy = false;
      var words = res.data.error && (res.status === 400 || res.status === 0) ? res.data.error
        : res.ok ? res.data.message : "Qorven could not change your timezone just now; try again in a moment.";
      if (res.ok) {
        self.own = res.data.timezone || "";
        self.workspace = res.data.workspace || self.workspace;
        self.show();
        if (!self.offer.hidden && from !== "offer") self.offer.hidden = true;
      }
      chat.say(words);
      if (from === "offer") { self.offerSays(words, res.ok); return; }
      if (!res.ok) { self.refused(words); return; }
      self.notice(null);
      self.input.removeAttribute("aria-invalid");
      self.input.removeAttribute("aria-describedby");
      self.input.value = self.own;
      self.said.textContent = words;
      self.said.hidden = false;
    });
  };

  global.QorvenTimezone = Timezone;
})(window);
