"""`/search <words>`: a person finds what was said in their one conversation from any
surface, without a model call — newest first, a page at a time, each match dated, with
its surface and writer; a group's search sees only that group; nobody else's words ever."""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from datetime import timezone as tz

import pytest

from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.lifecycle import session_rotate
from sessions_app.services.resolve import session_resolve
from tests.factories.tenancy import QorFactory
from tests.fakes.model_server import reply, tool_call

pytestmark = pytest.mark.django_db(transaction=True)

MARCH = datetime(2026, 3, 12, 19, 30, tzinfo=tz.utc)


def chat(world, user=None, qor=None, tenant=None):
    return session_resolve(tenant=tenant or world.tenant_a, qor=qor or world.qor_a, channel="web",
                           user=user or world.alice)


def group(world):
    return session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-100777",
                           group=True)


def said(session, content, *, role="user", channel="web", sender="Alice", at=None):
    return message_append(session=session, role=role, content=content, channel=channel, sender_name=sender,
                          created_at=at, notify=False).message


def ask(session, user, text, *, channel="telegram", trust="paired", sender_id=""):
    """`text` sent by `user` (from the platform account `sender_id`, in a group) on
    `channel` into `session`; the command's stored answer."""
    result = inbound_accept(session=session, content=text, channel=channel, sender_name=user.first_name,
                            trust=trust, user=user, metadata={"sender_id": sender_id} if sender_id else None)
    return Message.objects.get(session__tenant=session.tenant, metadata__reply_to=result.message.seq,
                               session=result.message.session, role="assistant").content


@pytest.fixture
def history(world):
    """Alice's conversation with aria over several surfaces, part of it archived by /clear;
    and what others said: bob (same Qor), alice with another Qor, charlie (other tenant),
    the family group alice is in."""
    old = chat(world)
    said(old, "Any good restaurant near the Duomo?", channel="telegram", at=MARCH)
    said(old, "Try Trattoria Sostanza, a restaurant famous for its steak.", role="assistant", sender="Aria",
         channel="telegram", at=MARCH + timedelta(minutes=1))
    session_rotate(session=old)  # /clear
    now = chat(world)
    said(now, "我昨天吃了寿司，很好吃", channel="whatsapp", at=MARCH + timedelta(days=30))
    said(now, "Book the restaurant for Friday", channel="slack_dm", at=MARCH + timedelta(days=31))
    said(chat(world, user=world.bob), "bob's restaurant secret: Da Ugo")
    other = QorFactory(tenant=world.tenant_a, slug="scribe", is_default=False)
    said(chat(world, qor=other), "restaurant list for the scribe")
    said(chat(world, user=world.charlie, qor=world.qor_b, tenant=world.tenant_b), "charlie's restaurant: Zuma")
    message_append(session=group(world), role="user", content="hello family", channel="telegram", sender_name="Alice",
                   metadata={"sender_id": "42"}, notify=False)  # alice's first words there
    said(group(world), "which restaurant tonight, folks?", channel="telegram", sender="Priya")
    return world


def test_search_finds_the_persons_words_across_surfaces_and_archived_chats_newest_first(history, model_server):
    answer = ask(chat(history), history.alice, "/search restaurant")
    lines = answer.splitlines()
    assert lines[0] == "Found in our conversation, newest first (“restaurant”):"
    assert lines[1] == "#1 · 12 Apr 2026 19:30 · Slack · you — Book the restaurant for Friday"
    assert lines[2].startswith("#2 · 12 Mar 2026 19:31 · Telegram · Aria — Try Trattoria Sostanza")
    assert lines[3] == "#3 · 12 Mar 2026 19:30 · Telegram · you — Any good restaurant near the Duomo?"
    assert len(lines) == 4  # no "older ones" line: that was all
    for foreign in ("Da Ugo", "scribe", "Zuma", "tonight"):
        assert foreign not in answer
    assert model_server.requests == []  # no model call


def test_search_finds_a_chinese_word_inside_a_sentence(history):
    answer = ask(chat(history), history.alice, "/search 寿司")
    assert answer.splitlines()[1:] == ["#1 · 11 Apr 2026 19:30 · WhatsApp · you — 我昨天吃了寿司，很好吃"]


def test_search_shows_dates_in_the_tenants_timezone(history):
    history.tenant_a.timezone = "Asia/Tokyo"
    history.tenant_a.save(update_fields=["timezone"])
    answer = ask(chat(history), history.alice, "/search Duomo")
    assert "#1 · 13 Mar 2026 04:30 · Telegram · you — Any good restaurant near the Duomo?" in answer


def test_search_pages_with_from_n_for_older_matches(world):
    session = chat(world)
    for i in range(12):
        said(session, f"note {i} about the garden", at=MARCH + timedelta(hours=i))
    first = ask(session, world.alice, "/search garden", channel="web")
    assert [line.split(" — ")[1] for line in first.splitlines()[1:6]] == [
        f"note {i} about the garden" for i in (11, 10, 9, 8, 7)]
    assert first.splitlines()[-1] == "Older ones: `/search garden from #6`."
    second = ask(session, world.alice, "/search garden from #6", channel="web")
    assert second.splitlines()[0] == "Older matches for “garden” (from #6):"
    assert second.splitlines()[1].startswith("#6 · ") and second.splitlines()[1].endswith("note 6 about the garden")
    assert second.splitlines()[-1] == "Older ones: `/search garden from #11`."
    third = ask(session, world.alice, "/search garden from #11", channel="web")
    assert [line.split(" — ")[1] for line in third.splitlines()[1:]] == ["note 1 about the garden",
                                                                         "note 0 about the garden"]
    assert ask(session, world.alice, "/search garden from #13", channel="web") == (
        "There are no older matches for “garden”.")
    assert ask(session, world.alice, "/search garden FROM #1", channel="web") == first
    assert ask(session, world.alice, "/search garden from #501", channel="web").startswith("Only the newest 500 matches")
    # The commands and their answers are never found themselves.
    assert ask(session, world.alice, "/search Older ones", channel="web").startswith("Nothing in our conversation")


def test_empty_words_give_the_usage_and_no_match_a_clear_line(history):
    session = chat(history)
    usage = ask(session, history.alice, "/search")
    assert usage.startswith("Usage: `/search words` finds them in our conversation")
    assert ask(session, history.alice, "/search   from #3") == usage
    assert ask(session, history.alice, "/search from #0") == usage
    assert ask(session, history.alice, "/search the").startswith("Those words are too common")
    assert ask(session, history.alice, "/search submarine") == "Nothing in our conversation matches “submarine”."
    # Bob's and charlie's words are theirs: not a match for alice, and they find only their own.
    assert ask(session, history.alice, "/search Ugo").startswith("Nothing")
    assert "Da Ugo" in ask(chat(history, user=history.bob), history.bob, "/search restaurant")
    charlie = chat(history, user=history.charlie, qor=history.qor_b, tenant=history.tenant_b)
    found = ask(charlie, history.charlie, "/search restaurant")
    assert "Zuma" in found and "Duomo" not in found and "Ugo" not in found


def test_a_groups_search_sees_only_that_group_never_a_members_own_chat(history):
    answer = ask(group(history), history.alice, "/search restaurant", trust="public", sender_id="42")
    (line,) = answer.splitlines()[1:]
    assert re.fullmatch(r"#1 · \d\d \w{3} \d{4} \d\d:\d\d · Telegram · Priya — which restaurant tonight, folks\?", line)
    assert "Duomo" not in answer and "Friday" not in answer


def test_an_unpaired_surface_does_not_search_the_conversation(history):
    answer = ask(chat(history), history.alice, "/search restaurant", channel="webchat", trust="public")
    assert answer == "Our conversation is searched only once you are paired with me."


def test_what_is_found_cannot_format_the_answer_on_any_surface(world):
    session = chat(world)
    said(session, "the tide: ```\n# heading\n> quote\n**bold** ||spoiler|| <@123> [site](https://x.example) _it_ "
                  "~gone~ \u202eevil", at=MARCH)
    answer = ask(session, world.alice, "/search tide", channel="web")
    (line,) = answer.splitlines()[1:]
    assert line.startswith("#1 · 12 Mar 2026 19:30 · Web · you — the tide: ")
    for active in ("`", "*", "_", "~", "|", "<", ">", "](", "\u202e"):
        assert active not in line, active
    assert "ˋˋˋ # heading › quote ∗∗bold∗∗ ǀǀspoilerǀǀ ‹@123› [site] (https://x.example) ˍitˍ ∼gone∼ evil" in line


def test_the_search_and_its_answer_stay_out_of_the_models_context(history, model_server, drain):
    session = chat(history)
    ask(session, history.alice, "/search Duomo")
    model_server.add(reply("Sure."))
    inbound_accept(session=session, content="thanks", channel="telegram", sender_name="Alice", trust="paired",
                   user=history.alice)
    drain()
    sent = json.dumps(model_server.requests[0]["messages"], ensure_ascii=False)
    assert "Duomo" not in sent and "/search" not in sent  # the archived words are not said again


def test_the_get_history_tool_searches_the_conversation_for_the_model(history, model_server, drain):
    session = chat(history)
    model_server.add(tool_call("get_history", {"query": "restaurant"}),
                     tool_call("get_history", {"query": "restaurant", "channel": "telegram", "limit": 1}),
                     tool_call("get_history", {"query": "the"}),
                     reply("It was Trattoria Sostanza."))
    inbound_accept(session=session, content="what was that restaurant you suggested in March?", channel="web",
                   sender_name="Alice", trust="paired", user=history.alice)
    drain()
    results = [json.loads(m["content"]) for m in model_server.requests[-1]["messages"] if m["role"] == "tool"]
    assert [(m["channel"], m["role"], m["text"]) for m in results[0]["matches"]] == [
        ("web", "user", "what was that restaurant you suggested in March?"),
        ("slack_dm", "user", "Book the restaurant for Friday"),
        ("telegram", "assistant", "Try Trattoria Sostanza, a restaurant famous for its steak."),
        ("telegram", "user", "Any good restaurant near the Duomo?"),
    ]
    assert results[0]["matches"][2]["earlier_conversation"] is True
    assert results[0]["matches"][2]["created_at"].startswith("2026-03-12T19:31")
    assert [m["text"] for m in results[1]["matches"]] == ["Try Trattoria Sostanza, a restaurant famous for its steak."]
    assert "no words to look for" in results[2]["error"]
    tool_text = " ".join(m["content"] for m in model_server.requests[-1]["messages"] if m["role"] == "tool")
    for foreign in ("Da Ugo", "scribe", "Zuma", "tonight"):
        assert foreign not in tool_text


def test_with_legacy_sessions_a_thread_searches_its_own_messages_and_its_cleared_ones(world, settings):
    settings.QORVEN_LEGACY_SESSIONS = True
    telegram = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", sender_id="42",
                               user=world.alice)
    said(telegram, "the spare key is with Marta", channel="telegram", at=MARCH)
    telegram = session_rotate(session=telegram).session  # /clear
    whatsapp = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="whatsapp", sender_id="15550100",
                               user=world.alice)
    said(whatsapp, "the key to the bike lock is 0420", channel="whatsapp")
    said(session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", sender_id="9", user=world.bob),
         "bob's key is under the mat", channel="telegram")
    answer = ask(telegram, world.alice, "/search key")
    assert answer.splitlines()[1:] == ["#1 · 12 Mar 2026 19:30 · Telegram · you — the spare key is with Marta"]


GERMAN = ("Grüße aus der Großstadt! Die Straße, die große Brücke, das Gießener Schloß, der Maßkrug, die Füße, "
          "der Gruß, der Spaß, der Fuß und das Floß: weißt du, wo wir uns am Brunnen treffen wollten?")
TURKISH = ("Wir fahren über İstanbul, İzmir, İnebolu, İskenderun, İspir, İznik, İdil, İmranlı, İpsala, İvrindi, "
           "İyidere und İkizce, dann treffen wir uns am Brunnen in der Altstadt.")


def test_a_snippet_starts_in_its_place_after_letters_whose_lower_case_is_longer(world):
    """"ß" folds to "ss" and "İ" to two letters: where the word was found in the folded
    text was taken for its place in the text, so a snippet began a character later for
    each of them before the word (and, after enough of them, inside the word)."""
    session = chat(world)
    said(session, GERMAN, at=MARCH)
    said(session, TURKISH, at=MARCH + timedelta(hours=1))
    answer = ask(session, world.alice, "/search Brunnen", channel="web")
    assert [line.split(" — ", 1)[1] for line in answer.splitlines()[1:]] == [
        "…İyidere und İkizce, dann treffen wir uns am Brunnen in der Altstadt.",
        "…Fuß und das Floß: weißt du, wo wir uns am Brunnen treffen wollten?",
    ]


def test_a_word_typed_with_a_letter_whose_lower_case_is_longer_is_found_and_shown_whole(world):
    """"Straße" and "İstanbul" typed were looked for as "strasse" and "i̇stanbul", which
    neither database's index holds: the message that has them was never found."""
    session = chat(world)
    said(session, "Grüße " * 30 + "— wir treffen uns an der Straße vor dem Hotel in İstanbul, gleich nach dem Essen.",
         at=MARCH)
    for typed in ("Straße", "straße", "İstanbul", "istanbul"):
        answer = ask(session, world.alice, f"/search {typed}", channel="web")
        (line,) = answer.splitlines()[1:]
        assert "an der Straße vor dem Hotel in İstanbul" in line, typed


def test_a_number_after_a_hash_is_looked_for_and_pages_are_asked_with_from(world):
    """`#N` at the end of the words was always a page: "issue #12" could never be found."""
    session = chat(world)
    said(session, "the fix for issue #12 landed on Monday", at=MARCH)
    said(session, "issue #7 is still open", at=MARCH + timedelta(hours=1))
    answer = ask(session, world.alice, "/search issue #12", channel="web")
    assert answer.splitlines()[1:] == ["#1 · 12 Mar 2026 19:30 · Web · you — the fix for issue #12 landed on Monday"]


def test_a_page_that_is_no_page_says_how_pages_are_numbered_instead_of_searching_it_as_words(world):
    """`from #0`, `from #-1`: the words were looked for with the mark in them ("hi from
    #-1"), and a page number of ten digits or more the same; only `#0` had an answer, the
    usage."""
    session = chat(world)
    for i in range(7):
        said(session, f"note {i} about the garden", at=MARCH + timedelta(hours=i))
    numbered = "Matches are numbered from #1, the newest: `/search garden` shows the first ones."
    for mark in ("#0", "#-1", "#-12", "#00"):
        assert ask(session, world.alice, f"/search garden from {mark}", channel="web") == numbered
    too_deep = "Only the newest 500 matches are shown; add a word to find it sooner."
    for mark in ("#501", "#1234567890", "#" + "9" * 5000):
        assert ask(session, world.alice, f"/search garden from {mark}", channel="web") == too_deep
    assert ask(session, world.alice, "/search garden from #+6", channel="web").splitlines()[0] == (
        "Older matches for “garden” (from #6):")
    assert ask(session, world.alice, "/search garden from #0006", channel="web").splitlines()[0] == (
        "Older matches for “garden” (from #6):")
    # A word after the hash is words, a channel's or a tag's name: looked for.
    said(session, "the photos from #travel are up", at=MARCH + timedelta(days=1))
    found = ask(session, world.alice, "/search photos from #travel", channel="web")
    assert found.splitlines()[1].endswith("the photos from #travel are up")
