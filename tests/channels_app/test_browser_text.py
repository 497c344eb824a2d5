"""Unusual text on the chat page, in a real browser (Debian's chromium): the markdown
renderer (channels_app/static/qorven/markdown.js) keeps links whole and reads CRLF text,
and a message in a right-to-left script is laid out right to left."""
from __future__ import annotations

from pathlib import Path

import pytest

from .browser_support import CHROMIUM, CHROMIUM_ARGS

MARKDOWN_JS = Path(__file__).resolve().parents[2] / "channels_app/static/qorven/markdown.js"
TEXT_PAGE: list = []  # the page `render` draws on


@pytest.fixture(scope="module")
def render():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_content("<!doctype html><div id=out></div>")
        page.add_script_tag(content=MARKDOWN_JS.read_text())
        TEXT_PAGE[:] = [page]

        def render(text: str) -> dict:
            """What the page shows of `text`: its HTML, its visible text, its links' targets."""
            return page.evaluate("""(t) => {
                const out = document.getElementById('out');
                out.innerHTML = QorvenMarkdown.render(t);
                return {html: out.innerHTML, text: out.innerText,
                        hrefs: [...out.querySelectorAll('a')].map(a => a.getAttribute('href'))};
            }""", text)

        yield render
        browser.close()


@pytest.mark.parametrize("url", [
    "https://en.wikipedia.org/wiki/_Underscore_",
    "https://example.com/a*b*c",
    "https://example.com/__init__.py",
    "https://example.com/~~old~~/page",
])
def test_a_link_with_markdown_characters_in_it_stays_one_working_link(render, url):
    for text in (f"see {url} now", f"see [the page]({url}) now"):
        shown = render(text)
        assert shown["hrefs"] == [url], shown["html"]
        assert "<em>" not in shown["html"] and "<strong>" not in shown["html"] and "<del>" not in shown["html"]


def test_text_with_crlf_line_ends_renders_its_headings_lists_and_code(render):
    shown = render("# Plan\r\n\r\n- milk\r\n- eggs\r\n\r\n```\r\nx = 1\r\n```\r\n")
    assert '<h3 dir="auto">Plan</h3>' in shown["html"]
    assert '<ul dir="auto"><li>milk</li><li>eggs</li></ul>' in shown["html"]
    assert '<pre dir="ltr"><code>x = 1</code></pre>' in shown["html"]
    assert "\r" not in shown["html"]


@pytest.mark.parametrize("text", [
    "مرحبا، كيف حالك؟ 😀", "שלום עולם", "你好，世界", "👨\u200d👩\u200d👧\u200d👦🇯🇵👍🏽", "e\u0301 zero\u200bwidth",
    "a < b && c > d", "<b>not bold</b> &amp; &lt;", "1 * 2 * 3 and snake_case_name and [x] [ ]",
])
def test_text_in_any_script_and_markup_characters_show_as_written(render, text):
    assert render(text)["text"] == text


def test_links_on_every_line_and_formatted_labels_still_work(render):
    shown = render("one https://a.example/x\ntwo [**bold** label](https://b.example/_y_)\n> three https://c.example")
    assert shown["hrefs"] == ["https://a.example/x", "https://b.example/_y_", "https://c.example"]
    assert "<strong>bold</strong> label</a>" in shown["html"]
    assert render("[https://a.example](https://b.example)")["hrefs"] == ["https://b.example"]  # no link in a link


def test_a_link_whose_label_holds_code_shows_the_code(render):
    shown = render("run [`qorven bind`](https://docs.example/bind) or `make run` [see `a*b*`](https://e.example)")
    assert shown["text"] == "run qorven bind or make run see a*b*"
    assert shown["hrefs"] == ["https://docs.example/bind", "https://e.example"]
    assert '<a href="https://docs.example/bind" target="_blank" rel="noopener noreferrer nofollow">' \
           "<code>qorven bind</code></a>" in shown["html"]


def test_each_paragraph_takes_the_direction_of_its_own_script(render):
    """Arabic or Hebrew laid out right to left (its question mark at its end, on the left),
    English beside it left to right, code always left to right."""
    render("مرحبا، كيف حالك؟\n\nHello, how are you?\n\n- שלום\n- עולם\n\n```\nx = 'مرحبا'\n```")
    directions = TEXT_PAGE[0].evaluate(
        "() => [...document.querySelectorAll('#out > *')].map(e => [e.tagName, getComputedStyle(e).direction])")
    assert directions == [["P", "rtl"], ["P", "ltr"], ["UL", "rtl"], ["PRE", "ltr"]]


@pytest.mark.django_db
def test_the_composers_and_sender_names_follow_their_texts_direction(client, world):
    """What the person types in Arabic is typed right to left; a sender's name in Hebrew
    does not pull the channel badge and time into its own direction."""
    from channels_app.services import binding_create

    client.force_login(world.alice)
    assert 'dir="auto"' in client.get("/chat/", follow=True).content.decode().split("<textarea", 1)[1].split(">", 1)[0]
    webchat = binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                             credentials={"key": "wc_text", "secret": "wc-secret"})
    frame = client.get(f"/webchat/{webchat.lookup_key}/frame")
    assert frame.status_code == 200, frame.status_code
    assert 'dir="auto"' in frame.content.decode().split("<textarea", 1)[1].split(">", 1)[0]
    css = (MARKDOWN_JS.parent / "chat.css").read_text()
    assert ".msg__who" in css and "unicode-bidi: plaintext" in css.split(".msg__who", 1)[1].split("}", 1)[0]


def test_a_table_keeps_escaped_and_coded_pipes_in_their_cells(render):
    shown = render("| Shell | Means |\n|---|---|\n| `a | b` | a pipe \\| in words |\n| <b>x</b> |")
    assert shown["html"].count("<tr>") == 3
    rows = TEXT_PAGE[0].evaluate(
        "() => [...document.querySelectorAll('#out tr')].map(r => [...r.cells].map(c => c.textContent))")
    assert rows == [["Shell", "Means"], ["a | b", "a pipe | in words"], ["<b>x</b>", ""]]


@pytest.mark.parametrize("text", [
    "A heading\n---",  # a setext underline, not a table's rule
    "a | b | c\n|---|---|\n| 1 | 2 |",  # the rule's columns are not the header's
    "just | a pipe in a sentence",
])
def test_text_that_is_not_a_table_stays_text(render, text):
    assert "<table" not in render(text)["html"]
