"""PostgreSQL: the owner joins the search vector, as one lexeme per memory.

`search_vector` becomes `to_tsvector('english', content)` plus the lexeme
`owner <tenant> <qor> <user or x>` (spaces: the text parser never makes such a lexeme, so
no content can match it). A search then asks the GIN index for `owner & word`, which the
index answers by intersecting two posting lists (fast even when the word is in most of
the table), instead of intersecting a word's matches with every row of the owner. The
column is generated, so the lexeme always follows the row's owner. SQLite is unchanged
(its FTS5 table already keys entries by owner).
"""
from django.db import migrations

OWNER = "'owner ' || tenant_id::text || ' ' || qor_id::text || ' ' || COALESCE(user_id::text, 'x')"
FORWARD = [
    "DROP INDEX IF EXISTS memory_search_vector_gin",
    "ALTER TABLE memory_app_memory DROP COLUMN IF EXISTS search_vector",
    "ALTER TABLE memory_app_memory ADD COLUMN search_vector tsvector GENERATED ALWAYS AS"
    f" (to_tsvector('english'::regconfig, content) || array_to_tsvector(ARRAY[{OWNER}])) STORED",
    "CREATE INDEX memory_search_vector_gin ON memory_app_memory USING gin (search_vector)",
]
BACKWARD = [
    "DROP INDEX IF EXISTS memory_search_vector_gin",
    "ALTER TABLE memory_app_memory DROP COLUMN IF EXISTS search_vector",
    "ALTER TABLE memory_app_memory ADD COLUMN search_vector tsvector"
    " GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED",
    "CREATE INDEX memory_search_vector_gin ON memory_app_memory USING gin (search_vector)",
]


def _run(statements: list[str]):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for sql in statements:
                schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('memory_app', '0002_memory_fulltext'),
    ]

    operations = [
        migrations.RunPython(_run(FORWARD), _run(BACKWARD)),
    ]
