/* A tiny, safe markdown subset for chat messages. No dependencies, no build step.
 *
 * Safety: the text is HTML-escaped FIRST; every tag in the output is one this file
 * writes, and the only attribute taken from the text is a link's href, which must be
 * http(s) or mailto. So no message can inject markup or script.
 *
 * Supported: ```fenced code```, `inline code`, **bold**, *italic* / _italic_,
 * ~~strike~~, [text](https://…), bare https:// links, # headings, - / * / 1. lists,
 * > quotes, | tables | (a header row, a |---|:---:| row, then rows), and line breaks.
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

  // A table row's cells: split on the pipes that are not escaped (\|) nor inside a
  // `code span`, its outer pipes optional.
  function cells(line) {
    var out = [];
    var cell = "";
    var inCode = false;
    var text = line.trim().replace(/^\|/, "");
    for (var i = 0; i < text.length; i++) {
      var c = text[i];
      if (c === "\\" && text[i + 1] === "|") { cell += "|"; i++; continue; }
      if (c === "`") inCode = !inCode;
      if (c === "|" && !inCode) { out.push(cell.trim()); cell = ""; continue; }
      cell += c;
    }
    if (cell.trim() || !/\|\s*$/.test(text)) out.push(cell.trim());
    return out;
  }
  var TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

  // The table whose header is lines[at] (its rule below it), or null; `end` is the index
  // after its last row.
  function table(lines, at) {
    if (at + 1 >= lines.length || lines[at].indexOf("|") < 0 || !TABLE_RULE.test(lines[at + 1])) return null;
    if (lines[at + 1].indexOf("|") < 0 && cells(lines[at]).length < 2) return null;  // a heading's ----- underline
    var head = cells(lines[at]);
    var aligns = cells(lines[at + 1]).map(function (rule) {
      var left = rule.charAt(0) === ":", right = rule.charAt(rule.length - 1) === ":";
      return left && right ? "center" : right ? "right" : left ? "left" : "";
    });
    if (aligns.length !== head.length) return null;
    function row(tag, values) {
      return "<tr>" + head.map(function (_, n) {
        var align = aligns[n] ? ' data-align="' + aligns[n] + '"' : "";
        return "<" + tag + align + ">" + inline(values[n] || "") + "</" + tag + ">";
      }).join("") + "</tr>";
    }
    var body = [];
    var end = at + 2;
    while (end < lines.length && lines[end].trim() && lines[end].indexOf("|") >= 0) {
      body.push(row("td", cells(lines[end])));
      end++;
    }
    // In a box of its own that scrolls sideways when wider than the bubble.
    var html = '<div class="msg__table" tabindex="0"><table dir="auto"><thead>' + row("th", head) + "</thead>" +
      (body.length ? "<tbody>" + body.join("") + "</tbody>" : "") + "</table></div>";
    return { html: html, end: end };
  }

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
      var grid = table(lines, i);
      if (grid) {
        flushAll();
        out.push(grid.html);
        i = grid.end - 1;
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
