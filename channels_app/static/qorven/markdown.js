/* A tiny, safe markdown subset for chat messages. No dependencies, no build step.
 *
 * Safety: the text is HTML-escaped FIRST; every tag in the output is one this file
 * writes, and the only attribute taken from the text is a link's href, which must be
 * http(s) or mailto. So no message can inject markup or script.
 *
 * Supported: ```fenced code```, `inline code`, **bold**, *italic* / _italic_,
 * ~~strike~~, [text](https://…), bare https:// links, # headings, - / * / 1. lists,
 * > quotes, and line breaks.
 *
 * Direction: every block takes its own from its first strong letter (dir="auto"), so an
 * Arabic or Hebrew paragraph is laid out right to left beside an English one; code is
 * always left to right.
 */
(function (global) {
  "use strict";

  function escapeHtml(text) {
    return String(text)
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");
  }

  var SAFE_URL = /^(https?:\/\/|mailto:)[^\s"'<>]+$/i;

  // Inline formatting of one already-escaped line. Code spans and links are cut out
  // first (held, put back last) so nothing inside them is formatted: a URL's _x_, *x*,
  // __x__ or ~~x~~ stays part of the address, not <em> in a broken href.
  // A link's label is formatted by a call of its own that shares `held`: the code spans
  // in it were cut out by the call around it, and are put back from there.
  function inline(escaped, inLink, outer) {
    var held = outer || [];
    function hold(html) {
      held.push(html);
      return "\u0000" + (held.length - 1) + "\u0000";
    }
    function anchor(url, label) {
      return hold('<a href="' + url + '" target="_blank" rel="noopener noreferrer nofollow">' + label + "</a>");
    }
    var text = escaped.replace(/`([^`\n]+)`/g, function (_, code) {
      return hold("<code>" + code + "</code>");
    });
    if (!inLink) {  // a link's label is formatted, but holds no link of its own
      text = text.replace(/\[([^\]\n]+)\]\(([^)\s]+)\)/g, function (whole, label, url) {
        var raw = url.replace(/&amp;/g, "&");
        if (!SAFE_URL.test(raw)) return whole;
        return anchor(url, inline(label, true, held));
      });
      text = text.replace(/(^|[\s(])(https?:\/\/[^\s<\u0000]+[^\s<\u0000.,;:!?)'"])/g, function (_, lead, url) {
        return lead + anchor(url, url);
      });
    }
    text = text
      .replace(/\*\*(?=\S)([^*\n]*?\S)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^\w])__(?=\S)([^_\n]*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
      .replace(/(^|[^*\w])\*([^*\s][^*\n]*?)\*(?!\w)/g, "$1<em>$2</em>")
      .replace(/(^|[^_\w])_([^_\s][^_\n]*?)_(?!\w)/g, "$1<em>$2</em>")
      .replace(/~~([^~\n]+)~~/g, "<del>$1</del>");
    return text.replace(/\u0000(\d+)\u0000/g, function (_, i) { return held[Number(i)]; });
  }

  function inlineLine(line) { return inline(line, false); }

  function render(source) {
    // CRLF and lone CR (email, Windows clipboards) end lines as LF does.
    var lines = escapeHtml(String(source || "").replace(/\u0000/g, "")).split(/\r\n?|\n/);
    var out = [];
    var para = [];
    var list = null; // {tag, items}
    var quote = [];

    function flushPara() {
      if (para.length) out.push("<p dir=\"auto\">" + para.map(inlineLine).join("<br>") + "</p>");
      para = [];
    }
    function flushList() {
      if (list) out.push("<" + list.tag + " dir=\"auto\">" + list.items.map(function (i) { return "<li>" + inline(i) + "</li>"; }).join("") + "</" + list.tag + ">");
      list = null;
    }
    function flushQuote() {
      if (quote.length) out.push("<blockquote dir=\"auto\">" + quote.map(inlineLine).join("<br>") + "</blockquote>");
      quote = [];
    }
    function flushAll() { flushPara(); flushList(); flushQuote(); }

    for (var i = 0; i < lines.length; i++) {
      var line = lines[i];
      var fence = line.match(/^\s*```\s*([\w+-]*)\s*$/);
      if (fence) {
        flushAll();
        var code = [];
        i++;
        while (i < lines.length && !/^\s*```\s*$/.test(lines[i])) { code.push(lines[i]); i++; }
        var lang = fence[1] ? ' data-lang="' + fence[1] + '"' : "";
        out.push("<pre dir=\"ltr\"" + lang + "><code>" + code.join("\n") + "</code></pre>");
        continue;
      }
      var heading = line.match(/^(#{1,3})\s+(.*)$/);
      if (heading) {
        flushAll();
        var level = heading[1].length + 2; // h3..h5: headings inside a bubble stay small
        out.push("<h" + level + " dir=\"auto\">" + inline(heading[2]) + "</h" + level + ">");
        continue;
      }
      var bullet = line.match(/^\s*[-*+]\s+(.*)$/);
      var numbered = line.match(/^\s*\d+[.)]\s+(.*)$/);
      if (bullet || numbered) {
        flushPara(); flushQuote();
        var tag = bullet ? "ul" : "ol";
        if (list && list.tag !== tag) flushList();
        if (!list) list = { tag: tag, items: [] };
        list.items.push((bullet || numbered)[1]);
        continue;
      }
      var quoted = line.match(/^&gt;\s?(.*)$/);
      if (quoted) {
        flushPara(); flushList();
        quote.push(quoted[1]);
        continue;
      }
      if (!line.trim()) { flushAll(); continue; }
      flushList(); flushQuote();
      para.push(line);
    }
    flushAll();
    return out.join("");
  }

  global.QorvenMarkdown = { render: render, escapeHtml: escapeHtml };
})(window);
