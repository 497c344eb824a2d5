"""History search on SQLite reads the marks written in a word (the vowel signs and viramas
of Hindi, Bengali, Tamil and the other Indic scripts; Arabic and Hebrew vowel points) as
part of it, as PostgreSQL's parser does: the FTS5 table is made again with unicode61
taking marks (categories M*) for letters. Its tokenizer took each mark for a space, so
"केला" (banana) was the letters क and ल to it, as "किला" (fort) was, and either word
found both.

SQLite: the search triggers are dropped with the table and made again with it, then the
new table is filled from the messages people read through the connection's
`message_search_text`, in batches of BATCH ids, each its own transaction (a message
written or edited meanwhile is indexed by its trigger; one in a batch not yet filled is
written again by it, the same). Until the fill ends, a message stored before it may not
be found. About 5 s per 100,000 messages (2 cores, a busy machine). PostgreSQL: nothing (its index already
reads words so).

Interrupted, it leaves the table partly filled: migrating again makes it again.
"""
from django.db import migrations, transaction

from ._trigger import SEARCH_TABLE, SEARCH_TEXT_FUNCTION, SEARCH_TRIGGERS

BATCH = 10_000
TOKENIZE = "porter unicode61 remove_diacritics 2 categories ''L* N* Co M*''"
TOKENIZE_BEFORE = "porter unicode61 remove_diacritics 2"
OWNER = "'t' || s.tenant_id || 'q' || s.qor_id || 'u' || COALESCE(s.user_id, 'x')"


def fts_made_again(connection, *, table: str, tokenize: str, triggers: dict[str, str], rows: str,
                   fill: str) -> None:
    """SQLite: the FTS5 `table` made again with `tokenize`, its `triggers` (name: SQL)
    dropped with it and made again with it; then filled by `fill`, an INSERT OR REPLACE
    of the ids between its two parameters, in batches of BATCH up to the last id of
    `rows`, each its own transaction. (memory_app 0011 makes its own table with it.)"""
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        for name in triggers:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
        cursor.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(owner, content, tokenize = '{tokenize}')")
        for sql in triggers.values():
            cursor.execute(sql)
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {rows}")
        last = cursor.fetchone()[0]
    for first in range(0, last, BATCH):
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(fill, [first, first + BATCH])


FILL = (
    f"INSERT OR REPLACE INTO {SEARCH_TABLE} (rowid, owner, content)"
    f" SELECT m.id, {OWNER}, {SEARCH_TEXT_FUNCTION}(m.content)"
    " FROM sessions_app_message m JOIN sessions_app_session s ON s.id = m.session_id"
    " WHERE m.id > %s AND m.id <= %s AND m.role IN ('user', 'assistant') AND m.content <> ''"
)


def _made_again(schema_editor, tokenize: str) -> None:
    if schema_editor.connection.vendor == "sqlite":
        fts_made_again(schema_editor.connection, table=SEARCH_TABLE, tokenize=tokenize, triggers=SEARCH_TRIGGERS,
                       rows="sessions_app_message", fill=FILL)


def forward(apps, schema_editor) -> None:
    _made_again(schema_editor, TOKENIZE)


def backward(apps, schema_editor) -> None:
    _made_again(schema_editor, TOKENIZE_BEFORE)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("sessions_app", "0018_message_search_stream_safe"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
