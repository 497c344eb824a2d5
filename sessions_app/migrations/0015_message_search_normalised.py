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

Not one transaction (REINDEX CONCURRENTLY cannot run in one).
"""
from django.db import migrations, transaction

from ._trigger import SEARCH_TABLE, SEARCH_TEXT_FUNCTION

BATCH = 10_000
INDEX = "message_search_text_gin"

# As sessions_app.fulltext.GREEK_FROM, GREEK_TO and FULL_WIDTH_FROM/TO were when this
# migration was written: the index depends on them staying so.
GREEK_FROM = (
    "ΆΈΉΊΌΎΏΐΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩΪΫάέήίΰςϊϋόύώἀἁἂἃἄἅἆἇἈἉἊἋἌἍἎἏἐἑἒἓἔἕἘἙἚἛἜἝἠἡἢἣἤἥἦἧἨἩἪἫἬἭἮἯ"
    "ἰἱἲἳἴἵἶἷἸἹἺἻἼἽἾἿὀὁὂὃὄὅὈὉὊὋὌὍὐὑὒὓὔὕὖὗὙὛὝὟὠὡὢὣὤὥὦὧὨὩὪὫὬὭὮὯὰάὲέὴήὶίὸόὺύὼώᾀᾁᾂᾃᾄᾅᾆᾇᾈᾉᾊᾋᾌᾍᾎᾏ"
    "ᾐᾑᾒᾓᾔᾕᾖᾗᾘᾙᾚᾛᾜᾝᾞᾟᾠᾡᾢᾣᾤᾥᾦᾧᾨᾩᾪᾫᾬᾭᾮᾯᾰᾱᾲᾳᾴᾶᾷᾸᾹᾺΆᾼιῂῃῄῆῇῈΈῊΉῌῐῑῒΐῖῗῘῙῚΊῠῡῢΰῤῥῦῧῨῩῪΎῬῲῳῴῶῷῸΌῺΏῼ"
)
GREEK_TO = (
    "αεηιουωιαβγδεζηθικλμνξοπρστυφχψωιυαεηιυσιυουωααααααααααααααααεεεεεεεεεεεεηηηηηηηηηηηηηηηηιιιιιιιιιιιι"
    "ιιιιοοοοοοοοοοοουυυυυυυυυυυυωωωωωωωωωωωωωωωωααεεηηιιοουυωωααααααααααααααααηηηηηηηηηηηηηηηηωωωωωωωω"
    "ωωωωωωωωααααααααααααιηηηηηεεηηηιιιιιιιιιιυυυυρρυυυυυυρωωωωωοοωωω"
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
    with schema_editor.connection.cursor() as cursor:  # no parameters: nothing in the SQL is read as one
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


def _spaced_as_before(content: str) -> str:
    """Migration 0010's search text of `content`: its unspaced letters spaced out, nothing else."""
    from sessions_app.fulltext import UNSPACED_RUN, letter_groups

    return UNSPACED_RUN.sub(lambda m: " " + " ".join(" ".join(g) for g in letter_groups(m.group())) + " ", content)


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
                                   [(_spaced_as_before(content), pk) for pk, content in batch])


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("sessions_app", "0014_carried_originals_settled"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
