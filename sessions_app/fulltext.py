"""Full-text search vocabulary shared by history search (sessions_app.search) and memory
search (memory_app): the text search configuration, stop words, how a person's text
becomes search terms, how the forms of a letter a reader takes for one (Greek accents,
capitals and final sigma; full-width letters) are written alike in what is indexed and
what is typed, how the letters of scripts written without spaces (Chinese, Japanese,
Thai) are spaced out so the index sees each as a word, and the owner token SQLite's FTS5
tables are keyed by. No SQL that touches rows."""
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


