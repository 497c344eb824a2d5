"""History search composes a run of thousands of combining marks (as "Zalgo" text is
written) at the cost of its length: PostgreSQL's `message_search_text` makes the text
stream-safe (UAX #15: a combining grapheme joiner, U+034F, after each 30 marks of a class
other than 0 in a row; sessions_app.fulltext.composed) before composing it (NFC), which
sorted such a run one place at a time, so a message of 100,000 of them held its insert
for minutes.

PostgreSQL: the function alone is replaced. A text with no such run of more than 30 is
indexed as before, so the index is not rebuilt; a message holding a longer one, indexed
before, keeps what it was indexed as (its marks sorted whole), which differs from what it
would be now only in the order of those marks. SQLite: the triggers call the connection's
Python function, which composes the same way (sessions_app.search): nothing to write.
"""
import importlib

from django.db import migrations

_0017 = importlib.import_module("sessions_app.migrations.0017_message_search_accents_korean")

# As sessions_app.fulltext.NON_STARTER was when this migration was written.
NON_STARTER = (
    r"[\u0300-\u034e\u0350-\u036f\u0483-\u0487\u0591-\u05bd\u05bf\u05c1-\u05c2\u05c4-\u05c5\u05c7"
    r"\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06e4\u06e7-\u06e8\u06ea-\u06ed\u0711"
    r"\u0730-\u074a\u07eb-\u07f3\u07fd\u0816-\u0819\u081b-\u0823\u0825-\u0827\u0829-\u082d"
    r"\u0859-\u085b\u0898-\u089f\u08ca-\u08e1\u08e3-\u08ff\u093c\u094d\u0951-\u0954\u09bc\u09cd\u09fe"
    r"\u0a3c\u0a4d\u0abc\u0acd\u0b3c\u0b4d\u0bcd\u0c3c\u0c4d\u0c55-\u0c56\u0cbc\u0ccd\u0d3b-\u0d3c"
    r"\u0d4d\u0dca\u0e38-\u0e3a\u0e48-\u0e4b\u0eb8-\u0eba\u0ec8-\u0ecb\u0f18-\u0f19\u0f35\u0f37\u0f39"
    r"\u0f71-\u0f72\u0f74\u0f7a-\u0f7d\u0f80\u0f82-\u0f84\u0f86-\u0f87\u0fc6\u1037\u1039-\u103a\u108d"
    r"\u135d-\u135f\u1714-\u1715\u1734\u17d2\u17dd\u18a9\u1939-\u193b\u1a17-\u1a18\u1a60\u1a75-\u1a7c"
    r"\u1a7f\u1ab0-\u1abd\u1abf-\u1ace\u1b34\u1b44\u1b6b-\u1b73\u1baa-\u1bab\u1be6\u1bf2-\u1bf3\u1c37"
    r"\u1cd0-\u1cd2\u1cd4-\u1ce0\u1ce2-\u1ce8\u1ced\u1cf4\u1cf8-\u1cf9\u1dc0-\u1dff\u20d0-\u20dc\u20e1"
    r"\u20e5-\u20f0\u2cef-\u2cf1\u2d7f\u2de0-\u2dff\u302a-\u302f\u3099-\u309a\ua66f\ua674-\ua67d"
    r"\ua69e-\ua69f\ua6f0-\ua6f1\ua806\ua82c\ua8c4\ua8e0-\ua8f1\ua92b-\ua92d\ua953\ua9b3\ua9c0\uaab0"
    r"\uaab2-\uaab4\uaab7-\uaab8\uaabe-\uaabf\uaac1\uaaf6\uabed\ufb1e\ufe20-\ufe2f\U000101fd\U000102e0"
    r"\U00010376-\U0001037a\U00010a0d\U00010a0f\U00010a38-\U00010a3a\U00010a3f\U00010ae5-\U00010ae6"
    r"\U00010d24-\U00010d27\U00010eab-\U00010eac\U00010f46-\U00010f50\U00010f82-\U00010f85\U00011046"
    r"\U00011070\U0001107f\U000110b9-\U000110ba\U00011100-\U00011102\U00011133-\U00011134\U00011173"
    r"\U000111c0\U000111ca\U00011235-\U00011236\U000112e9-\U000112ea\U0001133b-\U0001133c\U0001134d"
    r"\U00011366-\U0001136c\U00011370-\U00011374\U00011442\U00011446\U0001145e\U000114c2-\U000114c3"
    r"\U000115bf-\U000115c0\U0001163f\U000116b6-\U000116b7\U0001172b\U00011839-\U0001183a"
    r"\U0001193d-\U0001193e\U00011943\U000119e0\U00011a34\U00011a47\U00011a99\U00011c3f\U00011d42"
    r"\U00011d44-\U00011d45\U00011d97\U00016af0-\U00016af4\U00016b30-\U00016b36\U00016ff0-\U00016ff1"
    r"\U0001bc9e\U0001d165-\U0001d169\U0001d16d-\U0001d172\U0001d17b-\U0001d182\U0001d185-\U0001d18b"
    r"\U0001d1aa-\U0001d1ad\U0001d242-\U0001d244\U0001e000-\U0001e006\U0001e008-\U0001e018"
    r"\U0001e01b-\U0001e021\U0001e023-\U0001e024\U0001e026-\U0001e02a\U0001e130-\U0001e136\U0001e2ae"
    r"\U0001e2ec-\U0001e2ef\U0001e8d0-\U0001e8d6\U0001e944-\U0001e94a]"
)

COMPOSED = "  t := normalize(content, NFC);"
STREAM_SAFE = (
    f"  IF content ~ '{NON_STARTER}{{31}}' THEN"
    f"   t := normalize(regexp_replace(content, '({NON_STARTER}{{30}})(?={NON_STARTER})', '\\1' || chr(847), 'g'),"
    " NFC);"
    "  ELSE t := normalize(content, NFC); END IF;"
)
assert _0017.PG_FUNCTION.count(COMPOSED) == 1
PG_FUNCTION = _0017.PG_FUNCTION.replace(COMPOSED, STREAM_SAFE)


def _replace(schema_editor, function: str) -> None:
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:  # no parameters: nothing in the SQL is read as one
            cursor.execute(function)


def forward(apps, schema_editor) -> None:
    _replace(schema_editor, PG_FUNCTION)


def backward(apps, schema_editor) -> None:
    _replace(schema_editor, _0017.PG_FUNCTION)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0017_message_search_accents_korean"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
