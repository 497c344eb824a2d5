"""History search reads Greek with or without its accents, in capitals or not, with its
final sigma or the ordinary one, and letters and digits typed full-width as the ASCII ones:
`message_search_text` writes those letters as sessions_app.fulltext.NORMALISED does, in
what is indexed, and the query's words are folded by the same table.

PostgreSQL: the function is replaced (a `translate` of those letters before migration
0010's regular expressions) and its GIN index rebuilt CONCURRENTLY, messages being
written meanwhile. Until the rebuild ends, a message written before it that holds such
letters is found as before the migration (by the form it was written in), no other.

SQLite: the triggers already call the connection's Python function, which is search_text
itself; the entries of the messages holding such letters are written again from it, in
batches of BATCH ids, each its own transaction.

Not one transaction (REINDEX CONCURRENTLY cannot run in one). Interrupted on PostgreSQL,
it leaves the index's new copy behind, invalid, which running it again drops.
"""
import re
import unicodedata

from django.db import migrations, transaction

from ._trigger import SEARCH_TABLE, SEARCH_TEXT_FUNCTION

BATCH = 10_000
INDEX = "message_search_text_gin"

# As sessions_app.fulltext.GREEK_FROM, GREEK_TO and FULL_WIDTH_FROM/TO were when this
# migration was written: the index depends on them staying so.
GREEK_FROM = (
    "\u0386\u0388\u0389\u038a\u038c\u038e\u038f\u0390\u0391\u0392\u0393\u0394\u0395\u0396\u0397\u0398"
    "\u0399\u039a\u039b\u039c\u039d\u039e\u039f\u03a0\u03a1\u03a3\u03a4\u03a5\u03a6\u03a7\u03a8\u03a9"
    "\u03aa\u03ab\u03ac\u03ad\u03ae\u03af\u03b0\u03c2\u03ca\u03cb\u03cc\u03cd\u03ce\u1f00\u1f01\u1f02"
    "\u1f03\u1f04\u1f05\u1f06\u1f07\u1f08\u1f09\u1f0a\u1f0b\u1f0c\u1f0d\u1f0e\u1f0f\u1f10\u1f11\u1f12"
    "\u1f13\u1f14\u1f15\u1f18\u1f19\u1f1a\u1f1b\u1f1c\u1f1d\u1f20\u1f21\u1f22\u1f23\u1f24\u1f25\u1f26"
    "\u1f27\u1f28\u1f29\u1f2a\u1f2b\u1f2c\u1f2d\u1f2e\u1f2f\u1f30\u1f31\u1f32\u1f33\u1f34\u1f35\u1f36"
    "\u1f37\u1f38\u1f39\u1f3a\u1f3b\u1f3c\u1f3d\u1f3e\u1f3f\u1f40\u1f41\u1f42\u1f43\u1f44\u1f45\u1f48"
    "\u1f49\u1f4a\u1f4b\u1f4c\u1f4d\u1f50\u1f51\u1f52\u1f53\u1f54\u1f55\u1f56\u1f57\u1f59\u1f5b\u1f5d"
    "\u1f5f\u1f60\u1f61\u1f62\u1f63\u1f64\u1f65\u1f66\u1f67\u1f68\u1f69\u1f6a\u1f6b\u1f6c\u1f6d\u1f6e"
    "\u1f6f\u1f70\u1f71\u1f72\u1f73\u1f74\u1f75\u1f76\u1f77\u1f78\u1f79\u1f7a\u1f7b\u1f7c\u1f7d\u1f80"
    "\u1f81\u1f82\u1f83\u1f84\u1f85\u1f86\u1f87\u1f88\u1f89\u1f8a\u1f8b\u1f8c\u1f8d\u1f8e\u1f8f\u1f90"
    "\u1f91\u1f92\u1f93\u1f94\u1f95\u1f96\u1f97\u1f98\u1f99\u1f9a\u1f9b\u1f9c\u1f9d\u1f9e\u1f9f\u1fa0"
    "\u1fa1\u1fa2\u1fa3\u1fa4\u1fa5\u1fa6\u1fa7\u1fa8\u1fa9\u1faa\u1fab\u1fac\u1fad\u1fae\u1faf\u1fb0"
    "\u1fb1\u1fb2\u1fb3\u1fb4\u1fb6\u1fb7\u1fb8\u1fb9\u1fba\u1fbb\u1fbc\u1fbe\u1fc2\u1fc3\u1fc4\u1fc6"
    "\u1fc7\u1fc8\u1fc9\u1fca\u1fcb\u1fcc\u1fd0\u1fd1\u1fd2\u1fd3\u1fd6\u1fd7\u1fd8\u1fd9\u1fda\u1fdb"
    "\u1fe0\u1fe1\u1fe2\u1fe3\u1fe4\u1fe5\u1fe6\u1fe7\u1fe8\u1fe9\u1fea\u1feb\u1fec\u1ff2\u1ff3\u1ff4"
    "\u1ff6\u1ff7\u1ff8\u1ff9\u1ffa\u1ffb\u1ffc"
)
GREEK_TO = (
    "\u03b1\u03b5\u03b7\u03b9\u03bf\u03c5\u03c9\u03b9\u03b1\u03b2\u03b3\u03b4\u03b5\u03b6\u03b7\u03b8"
    "\u03b9\u03ba\u03bb\u03bc\u03bd\u03be\u03bf\u03c0\u03c1\u03c3\u03c4\u03c5\u03c6\u03c7\u03c8\u03c9"
    "\u03b9\u03c5\u03b1\u03b5\u03b7\u03b9\u03c5\u03c3\u03b9\u03c5\u03bf\u03c5\u03c9\u03b1\u03b1\u03b1"
    "\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b5\u03b5\u03b5"
    "\u03b5\u03b5\u03b5\u03b5\u03b5\u03b5\u03b5\u03b5\u03b5\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7"
    "\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9"
    "\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9\u03bf\u03bf\u03bf\u03bf\u03bf\u03bf\u03bf"
    "\u03bf\u03bf\u03bf\u03bf\u03bf\u03c5\u03c5\u03c5\u03c5\u03c5\u03c5\u03c5\u03c5\u03c5\u03c5\u03c5"
    "\u03c5\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9"
    "\u03c9\u03b1\u03b1\u03b5\u03b5\u03b7\u03b7\u03b9\u03b9\u03bf\u03bf\u03c5\u03c5\u03c9\u03c9\u03b1"
    "\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b7"
    "\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03b7\u03c9"
    "\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03c9\u03b1"
    "\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b1\u03b9\u03b7\u03b7\u03b7\u03b7"
    "\u03b7\u03b5\u03b5\u03b7\u03b7\u03b7\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9\u03b9"
    "\u03c5\u03c5\u03c5\u03c5\u03c1\u03c1\u03c5\u03c5\u03c5\u03c5\u03c5\u03c5\u03c1\u03c9\u03c9\u03c9"
    "\u03c9\u03c9\u03bf\u03bf\u03c9\u03c9\u03c9"
)
FULL_WIDTH_FROM = "０１２３４５６７８９ＡＢＣＤＥＦＧＨＩＪＫＬＭＮＯＰＱＲＳＴＵＶＷＸＹＺａｂｃｄｅｆｇｈｉｊｋｌｍｎｏｐｑｒｓｔｕｖｗｘｙｚ"
FULL_WIDTH_TO = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
NORMALISED_LETTER = "[" + GREEK_FROM + FULL_WIDTH_FROM + "]"

# Migration 0010's function, which this one wraps around a translate.
UNSPACED_LETTER = (
    r"[\u0e01-\u0e5b\u1000-\u109f\u1780-\u17f9\u3005-\u3007\u3021-\u3029\u3031-\u3035\u303b\u303c"
    r"\u3041-\u3096\u3099-\u30ff\u31f0-\u31ff\u3400-\u4db5\u4e00-\u9fcc\uf900-\ufad9\uff66-\uff9f"
    r"\U00020000-\U0002a6d6\U0002a700-\U0002b734\U0002b740-\U0002b81d\U0002f800-\U0002fa1d]"
)
UNSPACED_NOT_LETTER = (
    r"[\u0e31\u0e34-\u0e3f\u0e47-\u0e4f\u0e5a-\u0e5b\u102b-\u103e\u104a-\u104f\u1056-\u1059\u105e-\u1060"
    r"\u1062-\u1064\u1067-\u106d\u1071-\u1074\u1082-\u108d\u108f\u109a-\u109f\u17b4-\u17d6\u17d8-\u17db"
    r"\u17dd-\u17df\u17ea-\u17ef\u3099-\u309c\u30a0\u30fb\ufa6e-\ufa6f]"
)


def _function(text: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION {SEARCH_TEXT_FUNCTION}(content text) RETURNS text"
        " LANGUAGE sql IMMUTABLE PARALLEL SAFE"
        f" RETURN regexp_replace(regexp_replace({text}, '{UNSPACED_NOT_LETTER}', ' ', 'g'),"
        f" '({UNSPACED_LETTER})', ' \\1 ', 'g')"
    )


def _translated(text: str) -> str:
    """`text` (SQL) with NORMALISED's letters written anew. `translate` looks each letter up
    in its whole list, 100 µs a message for all of them at once: so in three steps, each
    only where a regular expression finds letters of its own (full-width; Greek; Greek
    with breathings, rarely written today), and a message without any costs one test."""
    steps = [
        ("[\\uff10-\\uff19\\uff21-\\uff3a\\uff41-\\uff5a]", FULL_WIDTH_FROM, FULL_WIDTH_TO),
        ("[\\u0386-\\u03ce]", *_greek(below_1f00=True)),
        ("[\\u1f00-\\u1fff]", *_greek(below_1f00=False)),
    ]
    translated = text
    for letters, source, target in steps:  # the steps' letters are apart: each tests the text as it came
        translated = (f"(CASE WHEN {text} ~ '{letters}' THEN translate({translated}, '{source}', '{target}')"
                      f" ELSE {translated} END)")
    anyone = "[" + "".join(letters[1:-1] for letters, _, _ in steps) + "]"
    return f"(CASE WHEN {text} ~ '{anyone}' THEN {translated} ELSE {text} END)"


def _greek(*, below_1f00: bool) -> tuple[str, str]:
    pairs = [(a, b) for a, b in zip(GREEK_FROM, GREEK_TO) if (ord(a) < 0x1F00) == below_1f00]
    return "".join(a for a, _ in pairs), "".join(b for _, b in pairs)


PG_FUNCTION = _function(_translated("content"))
PG_FUNCTION_BEFORE = _function("content")


def _postgresql(schema_editor, function: str) -> None:
    """The function replaced and its index rebuilt. An interrupted REINDEX CONCURRENTLY
    leaves its new copy behind, invalid (`…_ccnew`, `…_ccnew1`…): never read, but written
    with every message; those are dropped first."""
    with schema_editor.connection.cursor() as cursor:  # no parameters: nothing in the SQL is read as one
        cursor.execute("SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                       f" WHERE NOT i.indisvalid AND c.relname LIKE '{INDEX}\\_ccnew%'")
        left = [name for (name,) in cursor.fetchall()]
        for name in left:
            cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
        cursor.execute(function)
        cursor.execute(f"REINDEX INDEX CONCURRENTLY {INDEX}")


def _index_again(schema_editor, letters: str) -> None:
    """SQLite: the search entries holding any of `letters` (a regular expression) are
    written again from their message through the connection's function, in batches of ids."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {SEARCH_TABLE}")
        last = cursor.fetchone()[0]
    for first in range(0, last, BATCH):
        with transaction.atomic(using=schema_editor.connection.alias), schema_editor.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {SEARCH_TABLE} SET content = (SELECT {SEARCH_TEXT_FUNCTION}(m.content)"
                f" FROM sessions_app_message m WHERE m.id = {SEARCH_TABLE}.rowid)"
                f" WHERE rowid > %s AND rowid <= %s AND content REGEXP %s",
                [first, first + BATCH, letters],
            )


def forward(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        _postgresql(schema_editor, PG_FUNCTION)
    elif vendor == "sqlite":
        _index_again(schema_editor, NORMALISED_LETTER)


UNSPACED_RUN = re.compile(UNSPACED_LETTER + "+")


def _letter_groups(run: str) -> list[list[str]]:
    """As sessions_app.fulltext.letter_groups was: a run's letters (NFKC), in groups a mark
    or a sign of punctuation did not split."""
    groups: list[list[str]] = [[]]
    for char in unicodedata.normalize("NFKC", run):
        if unicodedata.category(char)[0] in "LN":
            groups[-1].append(char)
        elif unicodedata.category(char)[0] != "M" and groups[-1]:
            groups.append([])
    return [g for g in groups if g]


def spaced(content: str) -> str:
    """Migration 0010's search text of `content`: its unspaced letters spaced out, nothing else."""
    return UNSPACED_RUN.sub(lambda m: " " + " ".join(" ".join(g) for g in _letter_groups(m.group())) + " ", content)


def backward(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        _postgresql(schema_editor, PG_FUNCTION_BEFORE)
    elif vendor == "sqlite":
        # The connection's function is this version's: the entries of the messages holding
        # such letters are written here as migration 0010's function wrote them.
        Message = apps.get_model("sessions_app", "Message")
        db = schema_editor.connection.alias
        last = 0
        while True:
            batch = list(Message.objects.using(db).filter(pk__gt=last, content__regex=NORMALISED_LETTER,
                                                          role__in=["user", "assistant"])
                         .order_by("pk").values_list("pk", "content")[:BATCH])
            if not batch:
                break
            last = batch[-1][0]
            with transaction.atomic(using=db), schema_editor.connection.cursor() as cursor:
                cursor.executemany(f"UPDATE {SEARCH_TABLE} SET content = %s WHERE rowid = %s",
                                   [(spaced(content), pk) for pk, content in batch])


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("sessions_app", "0014_carried_originals_settled"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
