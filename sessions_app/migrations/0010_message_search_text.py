"""History search finds a Chinese, Japanese or Thai word inside a sentence: the index reads
each message through `message_search_text`, which spaces the letters of those scripts out
so each is a word (sessions_app.fulltext.search_text; memory search does the same).

PostgreSQL: an IMMUTABLE SQL function of that name, and a GIN index on
`to_tsvector('english', message_search_text(content))` of user and assistant rows, built
CONCURRENTLY (messages keep being written while it reads the table) to replace migration
0005's. No row is rewritten. The function does with regular expressions what
search_text does in Python, less its NFKC normalisation (a database whose encoding is
not UTF-8 could not run it on every message written): a vowel or tone mark (Thai, Khmer,
Myanmar) or a sign of punctuation becomes a space, and each letter stands between
spaces. The query passes what was typed through the same function, so the two agree.

SQLite: the search triggers index `message_search_text(NEW.content)`, a Python function
of each connection (sessions_app.search), and the entries of the messages already
holding such letters are written again from it, in batches of BATCH ids, each its own
transaction, so the serving process keeps writing between them.

Not one transaction (CREATE INDEX CONCURRENTLY cannot run in one). Interrupted on
PostgreSQL, it leaves an invalid index, which running it again drops and builds anew.
"""
from django.db import migrations, transaction

from ._trigger import SEARCH_TABLE, SEARCH_TEXT_FUNCTION, search_triggers

BATCH = 10_000
INDEX, OLD_INDEX = "message_search_text_gin", "message_search_gin"
PEOPLES_ROWS = "WHERE role IN ('user', 'assistant')"

# As sessions_app.fulltext.UNSPACED_LETTER was when this migration was written (the index
# depends on it staying so), and those of its characters that are not letters or digits
# (vowel and tone marks, punctuation, signs, unassigned): search_text keeps none of them,
# and they part no letters that it would not part anyway.
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
PG_FUNCTION = (
    f"CREATE OR REPLACE FUNCTION {SEARCH_TEXT_FUNCTION}(content text) RETURNS text"
    " LANGUAGE sql IMMUTABLE PARALLEL SAFE"
    f" RETURN regexp_replace(regexp_replace(content, '{UNSPACED_NOT_LETTER}', ' ', 'g'),"
    f" '({UNSPACED_LETTER})', ' \\1 ', 'g')"
)


def _index(name: str, text: str) -> str:
    return (f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON sessions_app_message"
            f" USING gin (to_tsvector('english'::regconfig, {text})) {PEOPLES_ROWS}")


def _build(schema_editor, name: str, text: str) -> None:
    """Build the index `name` concurrently; one an interruption left invalid is dropped
    first (IF NOT EXISTS would keep it, and a query would never use it)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                       " WHERE c.relname = %s", [name])
        invalid = cursor.fetchone()
    if invalid and invalid[0]:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    schema_editor.execute(_index(name, text))


def _index_again(schema_editor, text: str) -> None:
    """SQLite: the search entries of the messages holding unspaced letters hold `text`
    (SQL over their message, `m`) now, in batches of ids."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {SEARCH_TABLE}")
        last = cursor.fetchone()[0]
    for first in range(0, last, BATCH):
        with transaction.atomic(using=schema_editor.connection.alias), schema_editor.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {SEARCH_TABLE} SET content = (SELECT {text} FROM sessions_app_message m"
                f" WHERE m.id = {SEARCH_TABLE}.rowid) WHERE rowid > %s AND rowid <= %s AND content REGEXP %s",
                [first, first + BATCH, UNSPACED_LETTER],
            )


def _triggers(schema_editor, triggers: dict[str, str]) -> None:
    with transaction.atomic(using=schema_editor.connection.alias):  # no message written between the two
        for name in ("message_search_insert", "message_search_update"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")
            schema_editor.execute(triggers[name])


def forward(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(PG_FUNCTION)
        _build(schema_editor, INDEX, f"{SEARCH_TEXT_FUNCTION}(content)")
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {OLD_INDEX}")
    elif vendor == "sqlite":
        _triggers(schema_editor, search_triggers(f"{SEARCH_TEXT_FUNCTION}(NEW.content)"))
        _index_again(schema_editor, f"{SEARCH_TEXT_FUNCTION}(m.content)")


def backward(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        _build(schema_editor, OLD_INDEX, "content")
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {SEARCH_TEXT_FUNCTION}(text)")
    elif vendor == "sqlite":
        _triggers(schema_editor, search_triggers("NEW.content"))
        _index_again(schema_editor, "m.content")


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("sessions_app", "0009_thread_sessions_per_person"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
