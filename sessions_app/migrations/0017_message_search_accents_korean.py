"""History search ignores accents on PostgreSQL as on SQLite ("cafe" finds "café", "Müller"
"Muller"), reads an accent typed as a mark of its own after its letter (U+0301: Greek or
Latin) as the accented letter, and finds a Korean word inside a compound ("회의" in
"주간회의"): `message_search_text` composes the text (NFC), writes accented Latin letters
as the letter under them, drops the accents left as marks, and adds the inner parts of
Korean words, each marked (sessions_app.fulltext.hangul_parts).

PostgreSQL: the function is replaced (PL/pgSQL: the text is composed once, and a message
in ASCII alone is returned as it is at the first test) and its GIN index rebuilt
CONCURRENTLY, messages being written meanwhile. Until the rebuild ends, a message written
before it is found as before the migration. NFC needs a UTF-8 database, as migration
0015's Greek letters do.

SQLite: the triggers call the connection's Python function (sessions_app.search). The
entries of the messages holding such letters are written again here, from this
migration's own copy of the search text (search_text below), in batches of BATCH ids,
each its own transaction, so the serving process keeps writing between them.

Not one transaction (REINDEX CONCURRENTLY cannot run in one). Interrupted on PostgreSQL,
it leaves the index's new copy behind, invalid, which running it again drops.
"""
import importlib
import re
import unicodedata

from django.db import migrations, transaction

from ._trigger import SEARCH_TABLE, SEARCH_TEXT_FUNCTION

BATCH = 10_000

_0015 = importlib.import_module("sessions_app.migrations.0015_message_search_normalised")

# As sessions_app.fulltext's tables were when this migration was written: the index
# depends on them staying so.
LATIN_FROM = (
    "\u00c0\u00c1\u00c2\u00c3\u00c4\u00c5\u00c7\u00c8\u00c9\u00ca\u00cb\u00cc\u00cd\u00ce\u00cf\u00d1"
    "\u00d2\u00d3\u00d4\u00d5\u00d6\u00d9\u00da\u00db\u00dc\u00dd\u00e0\u00e1\u00e2\u00e3\u00e4\u00e5"
    "\u00e7\u00e8\u00e9\u00ea\u00eb\u00ec\u00ed\u00ee\u00ef\u00f1\u00f2\u00f3\u00f4\u00f5\u00f6\u00f9"
    "\u00fa\u00fb\u00fc\u00fd\u00ff\u0100\u0101\u0102\u0103\u0104\u0105\u0106\u0107\u0108\u0109\u010a"
    "\u010b\u010c\u010d\u010e\u010f\u0112\u0113\u0114\u0115\u0116\u0117\u0118\u0119\u011a\u011b\u011c"
    "\u011d\u011e\u011f\u0120\u0121\u0122\u0123\u0124\u0125\u0128\u0129\u012a\u012b\u012c\u012d\u012e"
    "\u012f\u0130\u0134\u0135\u0136\u0137\u0139\u013a\u013b\u013c\u013d\u013e\u0143\u0144\u0145\u0146"
    "\u0147\u0148\u014c\u014d\u014e\u014f\u0150\u0151\u0154\u0155\u0156\u0157\u0158\u0159\u015a\u015b"
    "\u015c\u015d\u015e\u015f\u0160\u0161\u0162\u0163\u0164\u0165\u0168\u0169\u016a\u016b\u016c\u016d"
    "\u016e\u016f\u0170\u0171\u0172\u0173\u0174\u0175\u0176\u0177\u0178\u0179\u017a\u017b\u017c\u017d"
    "\u017e\u01a0\u01a1\u01af\u01b0\u01cd\u01ce\u01cf\u01d0\u01d1\u01d2\u01d3\u01d4\u01d5\u01d6\u01d7"
    "\u01d8\u01d9\u01da\u01db\u01dc\u01de\u01df\u01e0\u01e1\u01e6\u01e7\u01e8\u01e9\u01ea\u01eb\u01ec"
    "\u01ed\u01f0\u01f4\u01f5\u01f8\u01f9\u01fa\u01fb\u0200\u0201\u0202\u0203\u0204\u0205\u0206\u0207"
    "\u0208\u0209\u020a\u020b\u020c\u020d\u020e\u020f\u0210\u0211\u0212\u0213\u0214\u0215\u0216\u0217"
    "\u0218\u0219\u021a\u021b\u021e\u021f\u0226\u0227\u0228\u0229\u022a\u022b\u022c\u022d\u022e\u022f"
    "\u0230\u0231\u0232\u0233\u1e00\u1e01\u1e02\u1e03\u1e04\u1e05\u1e06\u1e07\u1e08\u1e09\u1e0a\u1e0b"
    "\u1e0c\u1e0d\u1e0e\u1e0f\u1e10\u1e11\u1e12\u1e13\u1e14\u1e15\u1e16\u1e17\u1e18\u1e19\u1e1a\u1e1b"
    "\u1e1c\u1e1d\u1e1e\u1e1f\u1e20\u1e21\u1e22\u1e23\u1e24\u1e25\u1e26\u1e27\u1e28\u1e29\u1e2a\u1e2b"
    "\u1e2c\u1e2d\u1e2e\u1e2f\u1e30\u1e31\u1e32\u1e33\u1e34\u1e35\u1e36\u1e37\u1e38\u1e39\u1e3a\u1e3b"
    "\u1e3c\u1e3d\u1e3e\u1e3f\u1e40\u1e41\u1e42\u1e43\u1e44\u1e45\u1e46\u1e47\u1e48\u1e49\u1e4a\u1e4b"
    "\u1e4c\u1e4d\u1e4e\u1e4f\u1e50\u1e51\u1e52\u1e53\u1e54\u1e55\u1e56\u1e57\u1e58\u1e59\u1e5a\u1e5b"
    "\u1e5c\u1e5d\u1e5e\u1e5f\u1e60\u1e61\u1e62\u1e63\u1e64\u1e65\u1e66\u1e67\u1e68\u1e69\u1e6a\u1e6b"
    "\u1e6c\u1e6d\u1e6e\u1e6f\u1e70\u1e71\u1e72\u1e73\u1e74\u1e75\u1e76\u1e77\u1e78\u1e79\u1e7a\u1e7b"
    "\u1e7c\u1e7d\u1e7e\u1e7f\u1e80\u1e81\u1e82\u1e83\u1e84\u1e85\u1e86\u1e87\u1e88\u1e89\u1e8a\u1e8b"
    "\u1e8c\u1e8d\u1e8e\u1e8f\u1e90\u1e91\u1e92\u1e93\u1e94\u1e95\u1e96\u1e97\u1e98\u1e99\u1ea0\u1ea1"
    "\u1ea2\u1ea3\u1ea4\u1ea5\u1ea6\u1ea7\u1ea8\u1ea9\u1eaa\u1eab\u1eac\u1ead\u1eae\u1eaf\u1eb0\u1eb1"
    "\u1eb2\u1eb3\u1eb4\u1eb5\u1eb6\u1eb7\u1eb8\u1eb9\u1eba\u1ebb\u1ebc\u1ebd\u1ebe\u1ebf\u1ec0\u1ec1"
    "\u1ec2\u1ec3\u1ec4\u1ec5\u1ec6\u1ec7\u1ec8\u1ec9\u1eca\u1ecb\u1ecc\u1ecd\u1ece\u1ecf\u1ed0\u1ed1"
    "\u1ed2\u1ed3\u1ed4\u1ed5\u1ed6\u1ed7\u1ed8\u1ed9\u1eda\u1edb\u1edc\u1edd\u1ede\u1edf\u1ee0\u1ee1"
    "\u1ee2\u1ee3\u1ee4\u1ee5\u1ee6\u1ee7\u1ee8\u1ee9\u1eea\u1eeb\u1eec\u1eed\u1eee\u1eef\u1ef0\u1ef1"
    "\u1ef2\u1ef3\u1ef4\u1ef5\u1ef6\u1ef7\u1ef8\u1ef9"
)
LATIN_TO = (
    "AAAAAACEEEEIIIINOOOOOUUUUYaaaaaaceeeeiiiinooooouuuuyyAaAaAaCcCcCcCcDdEeEeEeEeEeGgGgGgGgHhIiIiIiIiIJjKkLlLlLlNnNnNn"
    "OoOoOoRrRrRrSsSsSsSsTtTtUuUuUuUuUuUuWwYyYZzZzZzOoUuAaIiOoUuUuUuUuUuAaAaGgKkOoOojGgNnAaAaAaEeEeIiIiOoOoRrRrUuUu"
    "SsTtHhAaEeOoOoOoOoYyAaBbBbBbCcDdDdDdDdDdEeEeEeEeEeFfGgHhHhHhHhHhIiIiKkKkKkLlLlLlLlMmMmMmNnNnNnNnOoOoOoOoPpPpRrRr"
    "RrRrSsSsSsSsSsTtTtTtTtUuUuUuUuUuVvVvWwWwWwWwWwXxXxYyZzZzZzhtwyAaAaAaAaAaAaAaAaAaAaAaAaEeEeEeEeEeEeEeEeIiIiOoOoOo"
    "OoOoOoOoOoOoOoOoOoUuUuUuUuUuUuUuYyYyYyYy"
)
COMBINING_ACCENTS = "".join(map(chr, range(0x0300, 0x0370)))
HANGUL_PART = 10
HANGUL_PART_MARK = "0"

NORMALISED = str.maketrans(_0015.GREEK_FROM + _0015.FULL_WIDTH_FROM + LATIN_FROM,
                           _0015.GREEK_TO + _0015.FULL_WIDTH_TO + LATIN_TO, COMBINING_ACCENTS)
NORMALISED_BEFORE = str.maketrans(_0015.GREEK_FROM + _0015.FULL_WIDTH_FROM, _0015.GREEK_TO + _0015.FULL_WIDTH_TO)
HANGUL_LONG_WORD = re.compile(r"[\uac00-\ud7a3]{3,}")
# The messages whose search text this migration changes hold one of these: an accented
# Latin letter, an accent as a mark of its own, Korean (syllables, or jamo that NFC joins
# into them). As escapes Python and SQLite's REGEXP read alike.
CHANGED = r"[\u00c0-\u024f\u1e00-\u1eff\u0300-\u036f\u1100-\u11ff\uac00-\ud7a3]"


def search_text(content: str) -> str:
    """What the index reads of `content` from this migration on (sessions_app.fulltext.search_text)."""
    text = _0015.spaced(unicodedata.normalize("NFC", content).translate(NORMALISED))
    parts = [HANGUL_PART_MARK + word[i:i + HANGUL_PART] for word in HANGUL_LONG_WORD.findall(text)
             for i in range(1, min(len(word) - 1, HANGUL_PART))]
    return text + " " + " ".join(parts) if parts else text


def search_text_before(content: str) -> str:
    """What the index read of `content` after migration 0015."""
    return _0015.spaced(content.translate(NORMALISED_BEFORE))


# Each its own step: `translate` reads its whole list for every letter of the text, and
# accented letters of Latin-1 (French, German, Spanish…) are by far the most written.
LATIN_BLOCKS = [("\\u00c0", "\\u00ff"), ("\\u0100", "\\u024f"), ("\\u1e00", "\\u1eff")]


def _latin(low: str, high: str) -> tuple[str, str]:
    first, last = int(low[2:], 16), int(high[2:], 16)
    pairs = [(a, b) for a, b in zip(LATIN_FROM, LATIN_TO) if first <= ord(a) <= last]
    return "".join(a for a, _ in pairs), "".join(b for _, b in pairs)


def _steps() -> str:
    """PL/pgSQL: `t` with NORMALISED's letters written anew, in steps, each only where a
    regular expression finds letters of its own (full-width; Greek; Greek with breathings;
    accented Latin, by block), and the accents left as marks dropped."""
    steps = [
        ("[\\uff10-\\uff19\\uff21-\\uff3a\\uff41-\\uff5a]", _0015.FULL_WIDTH_FROM, _0015.FULL_WIDTH_TO),
        ("[\\u0386-\\u03ce]", *_0015._greek(below_1f00=True)),
        ("[\\u1f00-\\u1fff]", *_0015._greek(below_1f00=False)),
        *[(f"[{low}-{high}]", *_latin(low, high)) for low, high in LATIN_BLOCKS],
    ]
    sql = "".join(f" IF t ~ '{letters}' THEN t := translate(t, '{source}', '{target}'); END IF;"
                  for letters, source, target in steps)
    return sql + " IF t ~ '[\\u0300-\\u036f]' THEN t := regexp_replace(t, '[\\u0300-\\u036f]', '', 'g'); END IF;"


PG_FUNCTION = (
    f"CREATE OR REPLACE FUNCTION {SEARCH_TEXT_FUNCTION}(content text) RETURNS text"
    " LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$"
    " DECLARE t text; parts text := ''; word text;"
    " BEGIN"
    "  IF content IS NULL OR content ~ '^[\\x01-\\x7f]*$' THEN RETURN content; END IF;"
    "  t := normalize(content, NFC);"
    f" {_steps()}"
    f"  t := regexp_replace(regexp_replace(t, '{_0015.UNSPACED_NOT_LETTER}', ' ', 'g'),"
    f" '({_0015.UNSPACED_LETTER})', ' \\1 ', 'g');"
    "  IF t ~ '[\\uac00-\\ud7a3]{3}' THEN"
    "   FOR word IN SELECT m[1] FROM regexp_matches(t, '[\\uac00-\\ud7a3]{3,}', 'g') AS m LOOP"
    f"    FOR i IN 2..least(char_length(word) - 1, {HANGUL_PART}) LOOP"
    f"     parts := parts || ' {HANGUL_PART_MARK}' || substr(word, i, {HANGUL_PART});"
    "    END LOOP;"
    "   END LOOP;"
    "  END IF;"
    "  RETURN t || parts;"
    " END $$"
)


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
        _0015._postgresql(schema_editor, _0015.PG_FUNCTION)
    elif vendor == "sqlite":
        _write(apps, schema_editor, search_text_before)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("sessions_app", "0016_message_delivery_unplanned"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
