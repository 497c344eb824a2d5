"""Full-text search vocabulary shared by history search (sessions_app.search) and memory
search (memory_app): the text search configuration, stop words, how a person's text
becomes search terms, how the letters of scripts written without spaces (Chinese,
Japanese, Thai) are spaced out so the index sees each as a word, and the owner token
SQLite's FTS5 tables are keyed by. No SQL that touches rows."""
from __future__ import annotations

import re
import unicodedata

# Used by the PostgreSQL generated column and every tsquery: they must agree.
PG_CONFIG = "english"
# Enough words to find a memory from a long message, few enough to keep the query cheap.
MAX_TERMS = 16

_WORD = re.compile(r"\w+", re.UNICODE)

# PostgreSQL's `english` stop words, so FTS5 (which has none) drops the same words from a
# query and "what is my laptop" searches for "laptop" on both databases.
STOPWORDS = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what which
    who whom this that these those am is are was were be been being have has had having do
    does did doing a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on
    off over under again further then once here there when where why how all any both each
    few more most other some such no nor not only own same so than too very s t can will
    just don should now
    """.split()
)


# Letters both indexes would otherwise keep apart from the letter a reader sees in them,
# each with the one it is searched as: Greek with its accents and breathings, in capitals
# and with its final sigma, as that letter in lower case (σ for ς) and bare, and letters
# and digits typed full-width as the ASCII ones. Neither database folds these: PostgreSQL
# keeps every accent and ς, SQLite's unicode61 keeps Greek accents (and folds ς alone),
# and "ΛΟΓΟΣ" typed became "λογος" here (Python's lower case of a final Σ) but "λογοσ" in
# PostgreSQL's index. One letter for one, so a place in the folded text is a place in
# the text (hit_spans). Applied alike to what is indexed (search_text, and on PostgreSQL
# the same table in migration 0015's function) and to what is typed (fold).
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
FULL_WIDTH_FROM = "".join(map(chr, [*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]))
FULL_WIDTH_TO = "".join(chr(ord(c) - 0xFEE0) for c in FULL_WIDTH_FROM)
NORMALISED = str.maketrans(GREEK_FROM + FULL_WIDTH_FROM, GREEK_TO + FULL_WIDTH_TO)
# The letters NORMALISED changes, as a regular expression Python and PostgreSQL read alike.
NORMALISED_LETTER = "[" + GREEK_FROM + FULL_WIDTH_FROM + "]"


def fold(text: str) -> str:
    """`text` in lower case as both databases' indexes hold it, one letter for one: "ß"
    stays "ß" and "İ" is "i" (casefold's "ss" and "i̇", a letter and a combining dot, are
    in neither index, so a word typed with them was never found); Greek and full-width
    letters as NORMALISED writes them ("ΛΟΓΟΣ" and "λόγος" are "λογοσ", "Ｔｏｋｙｏ" is
    "tokyo")."""
    return text.lower().replace("i\u0307", "i").translate(NORMALISED)


def search_terms(text: str) -> list[str]:
    """The distinct, lower-cased (fold) words of `text` worth searching for, at most MAX_TERMS.

    Stop words and one-letter words are dropped. A long text keeps its longest words,
    which are the rarer, more telling ones, in their original order.
    """
    seen: dict[str, None] = {}
    for word in _WORD.findall(fold(text)):
        word = word.strip("_")
        if len(word) > 1 and word not in STOPWORDS:
            seen.setdefault(word, None)
    words = list(seen)
    if len(words) > MAX_TERMS:
        keep = set(sorted(words, key=len, reverse=True)[:MAX_TERMS])
        words = [w for w in words if w in keep][:MAX_TERMS]
    return words


# Letters of scripts written without spaces between words. Only blocks SQLite's unicode61
# tokenizer knows (its tables are Unicode 6.1): a letter assigned later (CJK extensions
# E-G, the Lao letters of Unicode 12) would be a separator to SQLite and a letter to
# PostgreSQL, and the two databases would then disagree. Hangul is written with spaces,
# and left as it is. Written as regular-expression escapes that Python and PostgreSQL
# read alike (memory_app's migration 0008 filters rows with it on either database).
UNSPACED_LETTER = (
    r"[\u0e01-\u0e5b"  # Thai
    r"\u1000-\u109f"  # Myanmar
    r"\u1780-\u17f9"  # Khmer
    r"\u3005-\u3007\u3021-\u3029\u3031-\u3035\u303b\u303c"  # 々 〆 〇, Suzhou numerals, kana repeat marks
    r"\u3041-\u3096\u3099-\u30ff\u31f0-\u31ff"  # hiragana, katakana
    r"\u3400-\u4db5\u4e00-\u9fcc\uf900-\ufad9"  # CJK ideographs
    r"\uff66-\uff9f"  # half-width katakana
    r"\U00020000-\U0002a6d6\U0002a700-\U0002b734\U0002b740-\U0002b81d\U0002f800-\U0002fa1d]"  # extensions B-D
)
UNSPACED_RUN = re.compile(UNSPACED_LETTER + "+")


def letter_groups(run: str) -> list[list[str]]:
    """A run's letters, in groups a mark or a sign of punctuation did not split.

    NFKC first, so half-width katakana, a kana with a separate voicing mark and a
    compatibility ideograph index as their usual forms. Then only letters and digits are
    kept: a vowel or tone mark (Thai, Khmer, Myanmar) is a separator to SQLite's tokenizer
    and part of a word to PostgreSQL's, so it is dropped on both (matching ignores it, as
    SQLite ignores accents), and the two databases see the same tokens.
    """
    groups: list[list[str]] = [[]]
    for char in unicodedata.normalize("NFKC", run):
        if unicodedata.category(char)[0] in "LN":
            groups[-1].append(char)
        elif unicodedata.category(char)[0] != "M" and groups[-1]:
            groups.append([])  # punctuation: the letters either side are not one word
    return [g for g in groups if g]


def _half_width_katakana() -> dict[str, str]:
    """Each katakana (and the long vowel mark) that has a half-width form, with that form:
    one letter, or a letter and its voicing mark ("ガ": "ｶﾞ")."""
    forms: dict[str, str] = {}
    for code in range(0xFF66, 0xFF9E):
        letter = chr(code)
        forms.setdefault(unicodedata.normalize("NFKC", letter), letter)
        for mark in "\uff9e\uff9f":
            voiced = unicodedata.normalize("NFKC", letter + mark)
            if len(voiced) == 1:
                forms.setdefault(voiced, letter + mark)
    return forms


HALF_WIDTH_KATAKANA = _half_width_katakana()


def width_forms(run: str) -> list[str]:
    """The ways a run of letters written without spaces can be written, as typed first:
    its katakana full-width, and half-width ("デパート", "ﾃﾞﾊﾟｰﾄ"), which a reader takes for
    the same word. One form when it has no katakana."""
    full = unicodedata.normalize("NFKC", run)
    half = "".join(HALF_WIDTH_KATAKANA.get(c, c) for c in full)
    return list(dict.fromkeys([run, full, half]))


def search_text(content: str) -> str | None:
    """`content` as the full-text index reads it: Greek and full-width letters as NORMALISED
    writes them, and every letter of a script written without spaces alone between spaces,
    so each is a token on both databases; None when that is `content` itself (the index
    then reads the content, and nothing is kept twice).
    """
    text = content.translate(NORMALISED)
    if UNSPACED_RUN.search(text) is not None:
        text = UNSPACED_RUN.sub(lambda m: " " + " ".join(" ".join(g) for g in letter_groups(m.group())) + " ", text)
    return None if text == content else text


# Hangul syllables and jamo. Korean is written with spaces, but a particle is written onto
# the word before it ("스시를": sushi, and the object's particle), so history search finds a
# Korean word typed at the start of the words it has (message_terms).
HANGUL_WORD = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]+")


def message_terms(text: str) -> list[str]:
    """What history search looks for in a person's `text`, every one to occur, at most
    MAX_TERMS.

    Words of space-separated languages as search_terms gives them, and a Korean word of
    one syllable (책, 집), a word where an English letter alone is not. Each run of
    letters written without spaces is one term, as typed ("寿司", a lone 猫 too), found
    inside any sentence that holds it (sessions_app.search). Neither kind crowds out the
    other when both are many.
    """
    rest = UNSPACED_RUN.sub(" ", text)
    words = search_terms(rest)
    words += [w for w in dict.fromkeys(_WORD.findall(rest)) if len(w) == 1 and HANGUL_WORD.fullmatch(w)]
    runs = [run for run in dict.fromkeys(UNSPACED_RUN.findall(text)) if letter_groups(run)]
    runs = runs[:max(MAX_TERMS - len(words), MAX_TERMS // 2)]
    return words[:MAX_TERMS - len(runs)] + runs


def owner_token(*, tenant_id: int, qor_id: int, user_id: int | None) -> str:
    """One indexed FTS5 token naming a memory's (tenant, qor, user), so a search reads only
    that owner's postings. Letters and digits only: the tokenizer keeps it whole."""
    return f"t{tenant_id}q{qor_id}u{user_id if user_id is not None else 'x'}"


