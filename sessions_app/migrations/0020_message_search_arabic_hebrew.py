"""History search reads Arabic and Hebrew words with or without their vowel points and the
other signs written over and under their letters ("مرحبا" finds "مَرْحَبًا", "שלום" finds
"שָׁלוֹם", and back), and an Arabic word drawn out with tatweel as the word ("مـرحبا" is
"مرحبا"): `message_search_text` drops them (POINTS below; why these and no others:
sessions_app.fulltext.POINTS), after composing the text, as it drops the accents left as
marks. And it reads the spellings of an Arabic letter a reader takes for one as that
letter (ARABIC_FROM below; which and why: sessions_app.fulltext.ARABIC_FROM): "إلى" is
"الى", "مدرسة" is "مدرسه", Persian "کتاب" is "كتاب". Both indexes kept them, so a word
was found only as it had been written. And it also reads each Arabic word with the
article or a one-letter conjunction or preposition written onto it without it, after
the text (ARABIC_PREFIXES below; which and why: sessions_app.fulltext.ARABIC_PREFIXES):
"المدرسة" (the school) is also "مدرسة", so a search for "school" finds "the school".

PostgreSQL: the function is replaced (three more steps, each only where the text holds such
a sign or letter, or an Arabic word of four letters or more) and its GIN index rebuilt CONCURRENTLY, messages being written
meanwhile. Until the rebuild ends, a message written before it is found as before the
migration.

SQLite: the triggers call the connection's Python function (sessions_app.search). The
entries of the messages holding such signs or letters (or a Hebrew letter written with its
point as one character, which composing writes as the two), or an Arabic word that may
begin with a prefix, are written again here, from
this migration's own copy of the search text (search_text below), in batches of BATCH
ids, each its own transaction, so the serving process keeps writing between them.

Not one transaction (REINDEX CONCURRENTLY cannot run in one). Interrupted on PostgreSQL,
it leaves the index's new copy behind, invalid, which running it again drops.
"""
import importlib
import re
import unicodedata

from django.db import migrations, transaction

from ._trigger import SEARCH_TABLE

BATCH = 10_000

_0015 = importlib.import_module("sessions_app.migrations.0015_message_search_normalised")
_0017 = importlib.import_module("sessions_app.migrations.0017_message_search_accents_korean")
_0018 = importlib.import_module("sessions_app.migrations.0018_message_search_stream_safe")

# As sessions_app.fulltext.POINTS was when this migration was written: the index depends
# on it staying so. Hebrew points and cantillation; Arabic signs, tatweel, Quranic marks.
POINTS = "".join(map(chr, [
    *range(0x0591, 0x05BE), 0x05BF, 0x05C1, 0x05C2, 0x05C4, 0x05C5, 0x05C7,
    *range(0x0610, 0x061B), 0x0640, *range(0x064B, 0x0660), 0x0670,
    *range(0x06D6, 0x06DD), *range(0x06DF, 0x06E9), *range(0x06EA, 0x06EE),
]))
# POINTS, as escapes Python and PostgreSQL read alike.
POINT = (r"[\u0591-\u05bd\u05bf\u05c1-\u05c2\u05c4-\u05c5\u05c7\u0610-\u061a\u0640\u064b-\u065f\u0670"
         r"\u06d6-\u06dc\u06df-\u06e8\u06ea-\u06ed]")
# As sessions_app.fulltext.ARABIC_FROM and ARABIC_TO were when this migration was written:
# alef with hamza or madda, and alef wasla, as alef; teh marbuta as heh; alef maksura and
# Farsi yeh as yeh; keheh as kaf; heh with yeh above, heh goal (and with hamza) as heh.
ARABIC_FROM = "\u0622\u0623\u0625\u0671\u0629\u0649\u06cc\u06a9\u06c0\u06c1\u06c2"
ARABIC_TO = "\u0627\u0627\u0627\u0627\u0647\u064a\u064a\u0643\u0647\u0647\u0647"
# ARABIC_FROM, as escapes Python and PostgreSQL read alike.
ARABIC_LETTER = r"[\u0622\u0623\u0625\u0629\u0649\u0671\u06a9\u06c0-\u06c2\u06cc]"
# As sessions_app.fulltext.ARABIC_WORD_LETTER and ARABIC_PREFIXES were when this migration
# was written: the letters of an Arabic word, and the prefixes read off one, in the order
# they are tried, each with the letters that must be left after it.
ARABIC_WORD_LETTER = (r"[\u0620-\u063f\u0641-\u064a\u066e-\u066f\u0671-\u06d3\u06d5\u06ee-\u06ef"
                      r"\u06fa-\u06fc\u06ff\u0750-\u077f\u08a0-\u08c8]")
ARABIC_PREFIXES = (("ال", 2), ("وال", 2), ("بال", 2), ("كال", 2), ("فال", 2), ("لل", 2), ("و", 3))
ARABIC_NOT_A_STEM = ("له",)  # "الله" keeps its "ال"
ARABIC_PREFIXED_WORD = re.compile(ARABIC_WORD_LETTER + "{4,}")
# The messages whose search text this migration changes hold a point or such a letter, or
# one of the Hebrew letters written with their point as one character (U+FB1D-U+FB4E),
# which NFC writes as the letter and the point (an Arabic letter typed with its hamza or
# madda after it, which NFC writes as one of ARABIC_FROM, holds a point), or an accent
# as a mark of its own, which dropped joins the letters either side into a word; or else
# an Arabic word as written that may have a prefix read off: "ال" or "لل" and two more
# letters, or "و" and three (every prefix of ARABIC_PREFIXES holds one of them, with
# the letters its rule leaves after it). As escapes Python and PostgreSQL read alike
# (memory_app 0012 filters with it on either database).
CHANGED = (POINT[:-1] + ARABIC_LETTER[1:-1] + r"\ufb1d-\ufb4e\u0300-\u036f]"
           f"|(?:ال|لل){ARABIC_WORD_LETTER}{{2}}|و{ARABIC_WORD_LETTER}{{3}}")

NORMALISED = str.maketrans(_0015.GREEK_FROM + _0015.FULL_WIDTH_FROM + _0017.LATIN_FROM + ARABIC_FROM,
                           _0015.GREEK_TO + _0015.FULL_WIDTH_TO + _0017.LATIN_TO + ARABIC_TO,
                           _0017.COMBINING_ACCENTS + POINTS)
STREAM_SAFE_RUN = 30
_OVERLONG_RUN = re.compile(f"{_0018.NON_STARTER}{{{STREAM_SAFE_RUN}}}(?={_0018.NON_STARTER})")


def _arabic_stem(word: str) -> str | None:
    """The Arabic `word` without its prefix (ARABIC_PREFIXES), None when it has none."""
    for prefix, left in ARABIC_PREFIXES:
        if word.startswith(prefix) and len(word) >= len(prefix) + left and word[len(prefix):] not in ARABIC_NOT_A_STEM:
            return word[len(prefix):]
    return None


def _search_text(content: str, table: dict, *, prefixes: bool) -> str:
    """sessions_app.fulltext.search_text as it was written, its letters written anew by `table`:
    stream-safe and composed, normalised, unspaced letters spaced out, Korean inner parts
    added, then (`prefixes`) the Arabic words with a prefix without it."""
    if len(content) > STREAM_SAFE_RUN:
        content = _OVERLONG_RUN.sub("\\g<0>\u034f", content)
    text = _0015.spaced(unicodedata.normalize("NFC", content).translate(table))
    parts = [_0017.HANGUL_PART_MARK + word[i:i + _0017.HANGUL_PART] for word in _0017.HANGUL_LONG_WORD.findall(text)
             for i in range(1, min(len(word) - 1, _0017.HANGUL_PART))]
    if prefixes:
        parts += [stem for word in ARABIC_PREFIXED_WORD.findall(text) if (stem := _arabic_stem(word)) is not None]
    return text + " " + " ".join(parts) if parts else text


def search_text(content: str) -> str:
    """What the index reads of `content` from this migration on (sessions_app.fulltext.search_text)."""
    return _search_text(content, NORMALISED, prefixes=True)


def search_text_before(content: str) -> str:
    """What the index read of `content` after migrations 0017 to 0019."""
    return _search_text(content, _0017.NORMALISED, prefixes=False)


# Migration 0018's function, with the points dropped after the accents left as marks, the
# Arabic letters written anew (after composing: "ا" and a hamza typed after it are "أ"),
# and after the Korean inner parts, the Arabic words of four letters or more with a
# prefix without it, in order (a word is a match's w[1]; the first prefix that fits).
ACCENTS_DROPPED = " IF t ~ '[\\u0300-\\u036f]' THEN t := regexp_replace(t, '[\\u0300-\\u036f]', '', 'g'); END IF;"
assert _0018.PG_FUNCTION.count(ACCENTS_DROPPED) == 1
PG_FUNCTION = _0018.PG_FUNCTION.replace(
    ACCENTS_DROPPED, ACCENTS_DROPPED + f" IF t ~ '{POINT}' THEN t := regexp_replace(t, '{POINT}', '', 'g'); END IF;"
    f" IF t ~ '{ARABIC_LETTER}' THEN t := translate(t, '{ARABIC_FROM}', '{ARABIC_TO}'); END IF;")
DECLARED = " DECLARE t text; parts text := ''; word text;"
RETURNED = "  RETURN t || parts;"
assert PG_FUNCTION.count(DECLARED) == 1 and PG_FUNCTION.count(RETURNED) == 1
NOT_A_STEM = " ".join(f"AND substr(w[1], {{at}}) <> '{word}'" for word in ARABIC_NOT_A_STEM)
STEMS = " ".join(f"WHEN left(w[1], {len(prefix)}) = '{prefix}' AND char_length(w[1]) >= {len(prefix) + left}"
                 f" {NOT_A_STEM.format(at=len(prefix) + 1)} THEN substr(w[1], {len(prefix) + 1})"
                 for prefix, left in ARABIC_PREFIXES)
PG_FUNCTION = PG_FUNCTION.replace(DECLARED, DECLARED + " stems text;").replace(RETURNED, (
    f"  IF t ~ '{ARABIC_WORD_LETTER}{{4}}' THEN"
    f"   SELECT string_agg(CASE {STEMS} END, ' ' ORDER BY n) INTO stems"
    f"    FROM regexp_matches(t, '{ARABIC_WORD_LETTER}{{4,}}', 'g') WITH ORDINALITY AS m(w, n);"
    "   IF stems IS NOT NULL THEN parts := parts || ' ' || stems; END IF;"
    "  END IF;"
) + RETURNED)


def _write(apps, schema_editor, text_of) -> None:
    """SQLite: the search entries of the messages people read holding CHANGED letters are
    `text_of(content)` now, in batches of BATCH ids, each its own transaction."""
    Message = apps.get_model("sessions_app", "Message")
    db = schema_editor.connection.alias
    last = 0
    while True:
        batch = list(Message.objects.using(db).filter(pk__gt=last, content__regex=CHANGED,
                                                      role__in=["user", "assistant"])
                     .order_by("pk").values_list("pk", "content")[:BATCH])
        if not batch:
            break
        last = batch[-1][0]
        with transaction.atomic(using=db), schema_editor.connection.cursor() as cursor:
            cursor.executemany(f"UPDATE {SEARCH_TABLE} SET content = %s WHERE rowid = %s",
                               [(text_of(content), pk) for pk, content in batch])


def forward(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        _0015._postgresql(schema_editor, PG_FUNCTION)
    elif vendor == "sqlite":
        _write(apps, schema_editor, search_text)


def backward(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        _0015._postgresql(schema_editor, _0018.PG_FUNCTION)
    elif vendor == "sqlite":
        _write(apps, schema_editor, search_text_before)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("sessions_app", "0019_message_search_marks_in_words"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
