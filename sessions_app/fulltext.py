"""Full-text search vocabulary shared by history search (sessions_app.search) and memory
search (memory_app): the text search configuration, stop words, how a person's text
becomes search terms, how the forms of a letter a reader takes for one (Greek accents,
capitals and final sigma; full-width letters; Latin accents; Arabic and Hebrew vowel
points; the spellings of an Arabic letter) are written alike in what is indexed and what
is typed, how the letters of scripts written without spaces (Chinese, Japanese, Thai) are
spaced out so the index sees each as a word, how an Arabic word is also read without
the article or one-letter conjunction or preposition written onto it (arabic_stems,
arabic_forms), and the owner token SQLite's FTS5 tables are keyed by. No SQL that
touches rows."""
from __future__ import annotations

import re
import unicodedata

from .unicode_marks import MARK

# Used by the PostgreSQL generated column and every tsquery: they must agree.
PG_CONFIG = "english"
# Enough words to find a memory from a long message, few enough to keep the query cheap.
MAX_TERMS = 16

# A word: letters, digits and the marks written in them (vowel signs, viramas, vowel
# points: "हिन्दी" is one word, as PostgreSQL's parser reads it).
_WORD = re.compile(r"[\w" + MARK[1:-1] + "]+")
_ASCII_WORD = re.compile(r"\w+")


def words_of(text: str) -> list[str]:
    """The words of `text` (_WORD). Text in ASCII holds no mark: its words are found by the
    plain word class alone, in a third of the time the marks' class takes (every turn's
    memory retrieval reads the person's message)."""
    return (_ASCII_WORD if text.isascii() else _WORD).findall(text)

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
# the same table in migration 0016's function) and to what is typed (fold).
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
# Latin letters with accents (Latin-1, Extended-A and -B, Extended Additional) as the
# letter under them: accents are ignored, as a search engine ignores them ("cafe" finds
# "café", "Muller" "Müller"). SQLite's index dropped them (remove_diacritics 2), and
# PostgreSQL's `english` configuration kept them, so the two found different messages.
# Only a letter whose canonical decomposition is an ASCII letter and accents: "ł", "ø",
# "ß" and "æ" are letters of their own, to both databases alike. Migration 0016 holds a
# copy, which its index depends on (tests/sessions_app/test_search_normalised.py).
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
    "AAAAAACEEEEIIIINOOOOOUUUUYaaaaaaceeeeiiiinooooouuuuyyAaAaAaCcCcCcCcDdEeEeEeEeEeGgGgGgGgHhIiIiIiIiIJjKkLlLlLlNnNnNnOoOoOoRrRrRrSsSsSsSsTtTtUuUuUuUuUuUuWwYyYZzZzZzOoUuAaIiOoUuUuUuUuUuAaAaGgKkOoOojGgNnAaAaAaEeEeIiIiOoOoRrRrUuUuSsTtHhAaEeOoOoOoOoYyAaBbBbBbCcDdDdDdDdDdEeEeEeEeEeFfGgHhHhHhHhHhIiIiKkKkKkLlLlLlLlMmMmMmNnNnNnNnOoOoOoOoPpPpRrRrRrRrSsSsSsSsSsTtTtTtTtUuUuUuUuUuVvVvWwWwWwWwWwXxXxYyZzZzZzhtwyAaAaAaAaAaAaAaAaAaAaAaAaEeEeEeEeEeEeEeEeIiIiOoOoOoOoOoOoOoOoOoOoOoOoUuUuUuUuUuUuUuYyYyYyYy"
)
# Accents written as marks of their own after the letter (U+0300 to U+036F: a keyboard's
# dead key, a copy from a PDF). What NFC cannot join to its letter is dropped.
COMBINING_ACCENTS = "".join(map(chr, range(0x0300, 0x0370)))
# Arabic and Hebrew are written without their vowels, and a word is read the same with
# them written over and under its letters (the Quran, the Bible, poetry, a children's
# book, a name pointed to be read right): "مرحبا" is "مَرْحَبًا", "שלום" is "שָׁלוֹם". So
# these are dropped, as the accents are: the signs that say how a word is read, not a
# letter of it (where a point does make a letter of its own, Yiddish's פּ and פֿ,
# Kashmiri's vowels, both forms are found, as "ano" finds "año"). Hebrew: the points
# (vowels, dagesh, shin and sin dots, rafe, meteg, qamats qatan), the Bible's
# cantillation and the masora's dots (U+0591-U+05BD, U+05BF, U+05C1-U+05C2,
# U+05C4-U+05C5, U+05C7); not the maqaf, paseq, sof pasuq or nun hafukha (U+05BE, U+05C0,
# U+05C3, U+05C6: punctuation between words). Arabic: the harakat (tanwin, fatha, damma,
# kasra, shadda, sukun), the maddah and hamza NFC could not join to their letter ("أ" and
# "آ" are letters, searched as "ا": ARABIC_FROM) and the other vowel signs (U+064B-U+065F); the superscript ("dagger")
# alef (U+0670); the honorifics and small vowels written over a word (U+0610-U+061A); the
# Quran's recitation marks written over and under its letters, with the small waw and yeh
# that say a vowel is long as the dagger alef does (U+06D6-U+06DC, U+06DF-U+06E8,
# U+06EA-U+06ED); not the end of a verse, the start of a hizb or the place of prostration
# (U+06DD, U+06DE, U+06E9: signs between words). And the tatweel (U+0640), which draws a
# word out to fill a line and splits nothing: "مـــرحبا" is "مرحبا". The vowel signs of
# the Indic scripts are kept in their words, where they tell words apart ("केला", banana,
# is not "किला", fort), and so are those of other scripts (Syriac, Thaana, N'Ko, Arabic
# Extended-A's for African languages, which write their vowels). Dropped in what is
# indexed (search_text, and on PostgreSQL migration 0020's function) and in what is typed
# (fold): one letter gives none, so a place in the folded text is still a place in the
# text, and the word is marked whole (hit_spans).
POINTS = "".join(map(chr, [
    *range(0x0591, 0x05BE), 0x05BF, 0x05C1, 0x05C2, 0x05C4, 0x05C5, 0x05C7,  # Hebrew
    *range(0x0610, 0x061B), 0x0640, *range(0x064B, 0x0660), 0x0670,  # Arabic
    *range(0x06D6, 0x06DD), *range(0x06DF, 0x06E9), *range(0x06EA, 0x06EE),  # the Quran's marks
]))
# Arabic letters written in more than one way that a reader takes for one letter, each
# with the one it is searched as, as Arabic search engines read them (Lucene's
# ArabicNormalizer, and the PersianNormalizer its Persian analyzer adds): an alef with its
# hamza over or under it or its madda (أ إ آ) as the bare alef ا, which is how most write
# it ("ايمان" finds "إيمان"); teh marbuta ة as heh ه, the letter it is written as when
# its dots are left off ("مدرسه" finds "مدرسة"); alef maksura ى as yeh ي, which it is
# written for ("الى" finds "إلى"); and the letters Persian and Urdu keyboards type for
# Arabic ones: Farsi yeh ی as yeh, keheh ک as kaf ك ("کتاب" finds "كتاب"), and heh with
# the ezafe's yeh ۀ and Urdu's heh goal ہ (with its hamza, ۂ) as heh. And, beyond Lucene,
# alef wasla ٱ, the Quran's alef where the hamza is not said ("ٱللَّه" is "الله"). Text is
# composed first (NFC), so an alef with a hamza typed after it is "أ" and then "ا", as
# the hamza alone, a point, is dropped. Not Lucene's yeh barree ے as yeh: in Urdu it is a
# letter of its own ("کے" and "کی", of, are two words); nor the hamza on waw and yeh (ؤ,
# ئ), which Lucene keeps, a letter of the word ("سؤال" is not "سوال"). One letter for one,
# so a place in the folded text is a place in the text (hit_spans). Applied alike to what
# is indexed (search_text, and on PostgreSQL migration 0020's function) and to what is
# typed (fold).
ARABIC_FROM = "\u0622\u0623\u0625\u0671\u0629\u0649\u06cc\u06a9\u06c0\u06c1\u06c2"
ARABIC_TO = "\u0627\u0627\u0627\u0627\u0647\u064a\u064a\u0643\u0647\u0647\u0647"
NORMALISED = str.maketrans(GREEK_FROM + FULL_WIDTH_FROM + LATIN_FROM + ARABIC_FROM,
                           GREEK_TO + FULL_WIDTH_TO + LATIN_TO + ARABIC_TO, COMBINING_ACCENTS + POINTS)
# The letters NORMALISED changes, as a regular expression Python and PostgreSQL read alike.
NORMALISED_LETTER = "[" + GREEK_FROM + FULL_WIDTH_FROM + LATIN_FROM + ARABIC_FROM + COMBINING_ACCENTS + POINTS + "]"


# The marks of a combining class other than 0 (Unicode 14, as Python's unicodedata has
# them), as regular-expression escapes Python and PostgreSQL read alike. Composing text
# (NFC, NFKC) sorts each run of them by class, one place at a time: thousands in a row, of
# two classes in turn (as "Zalgo" text is written), cost the square of their number, and a
# message of 100,000 such characters took seconds to index here and minutes in
# PostgreSQL. Unicode's stream-safe format (UAX #15) puts a combining grapheme joiner
# (U+034F, of class 0, which NORMALISED drops with the accents) after each 30 of them, so
# a run is sorted 30 marks at a time; text with no run that long is composed as before.
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
STREAM_SAFE_RUN = 30
GRAPHEME_JOINER = "\u034f"
_OVERLONG_RUN = re.compile(f"{NON_STARTER}{{{STREAM_SAFE_RUN}}}(?={NON_STARTER})")


def composed(text: str, form: str = "NFC") -> str:
    """`text` in Unicode normal `form`, made stream-safe first (NON_STARTER), so composing
    costs what the text's length does. (A text too short to hold such a run, as a letter
    folded alone (sessions_app.search.hit_spans), is not searched for one.)"""
    if len(text) > STREAM_SAFE_RUN:
        text = _OVERLONG_RUN.sub("\\g<0>" + GRAPHEME_JOINER, text)
    return unicodedata.normalize(form, text)


def normalised(text: str) -> str:
    """`text` as both indexes read it, in its case: composed (NFC: an accent typed after its
    letter is the accented letter, a Korean syllable typed as its jamo is the syllable),
    then with the letters NORMALISED changes written as it writes them."""
    return composed(text).translate(NORMALISED)


def fold(text: str) -> str:
    """`text` in lower case as both databases' indexes hold it (normalised): "ß" stays "ß"
    and "İ" is "i" (casefold's "ss" and "i̇", a letter and a combining dot, are in neither
    index, so a word typed with them was never found); Greek, full-width and accented
    Latin letters as NORMALISED writes them ("ΛΟΓΟΣ" and "λόγος" are "λογοσ", "Ｔｏｋｙｏ"
    is "tokyo", "Müller" is "muller", "מַיִם" is "מים", "إلى" is "الي"). One letter gives one letter or none
    (an accent of its own, a vowel point, a tatweel), so a place in the folded text is a
    place in the text (hit_spans)."""
    return composed(text).lower().translate(NORMALISED)


def search_terms(text: str) -> list[str]:
    """The distinct, lower-cased (fold) words of `text` worth searching for, at most MAX_TERMS.

    Stop words and one-letter words are dropped. A long text keeps its longest words,
    which are the rarer, more telling ones, in their original order.
    """
    seen: dict[str, None] = {}
    for word in words_of(fold(text)):
        word = korean_stem(word.strip("_"))
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
    for char in composed(run, "NFKC"):
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
    full = composed(run, "NFKC")
    half = "".join(HALF_WIDTH_KATAKANA.get(c, c) for c in full)
    return list(dict.fromkeys([run, full, half]))


def search_text(content: str) -> str | None:
    """`content` as the full-text index reads it: normalised (accents, Greek, full-width,
    Arabic and Hebrew points, Arabic letters' spellings), every letter of a script written without spaces alone
    between spaces, so each is a token on both databases, and after it all the inner parts
    of Korean words (hangul_parts), then the Arabic words with a prefix without it
    (arabic_stems); None when that is `content` itself (the index then reads the content,
    and nothing is kept twice).
    """
    text = normalised(content)
    if UNSPACED_RUN.search(text) is not None:
        text = UNSPACED_RUN.sub(lambda m: " " + " ".join(" ".join(g) for g in letter_groups(m.group())) + " ", text)
    parts = hangul_parts(text) + arabic_stems(text)
    if parts:
        text += " " + " ".join(parts)
    return None if text == content else text



# The letters of an Arabic word (after NORMALISED: the Arabic block's letters but the
# tatweel, the Persian, Urdu and other languages' letters of Arabic Supplement and
# Extended-A), as regular-expression escapes Python and PostgreSQL read alike.
ARABIC_WORD_LETTER = (r"[\u0620-\u063f\u0641-\u064a\u066e-\u066f\u0671-\u06d3\u06d5\u06ee-\u06ef"
                      r"\u06fa-\u06fc\u06ff\u0750-\u077f\u08a0-\u08c8]")
ARABIC_WORD = re.compile(ARABIC_WORD_LETTER + "+")
# Arabic writes the article and some one-letter conjunctions and prepositions onto the
# word: "المدرسة" (the school), "والمدرسة" (and the school), "بالمدرسة" (at the school),
# "للمدرسة" (for the school). Both indexes took the whole for one word, so "مدرسة" did
# not find "the school". Read off as Arabic search engines read them (Lucene's
# ArabicStemmer.stemPrefix): the first of these the word starts with, when as many
# letters as given are left after it, so a short word keeps its letters ("ولد", boy, is
# no "and"; "لله"). One prefix at most ("وللبيت" is "للبيت"), and no suffix: the plural
# and the possessive endings would take too much off for a search that shows what it
# found. The index also reads each such word without its prefix (arabic_stems, after
# the text, unmarked: it is the word), and a word typed is searched with and without
# its own (arabic_forms), so "المدرسة" and "مدرسة" each find both, as does "وزير"
# (minister, no "and" in it) "الوزير". Lucene's rule, but for one word: "الله" (God),
# whose "ال" belongs to the name, keeps it. Read off, it left "له" (to him), among the
# commonest words, and every search for either found the other; "والله" (by God) is
# "الله" with its "و" read off.
ARABIC_PREFIXES = (("ال", 2), ("وال", 2), ("بال", 2), ("كال", 2), ("فال", 2), ("لل", 2), ("و", 3))
# What is left after a prefix that is no word without it (the next prefix is tried).
ARABIC_NOT_A_STEM = frozenset({"له"})
# The shortest word a prefix is read off: an Arabic word of fewer letters adds nothing.
ARABIC_PREFIXED_WORD = re.compile(ARABIC_WORD_LETTER + "{4,}")


def arabic_prefix(word: str) -> int:
    """How many letters of the Arabic `word` (normalised) are a prefix ARABIC_PREFIXES reads
    off: 0 when none is."""
    for prefix, left in ARABIC_PREFIXES:
        if word.startswith(prefix) and len(word) >= len(prefix) + left and word[len(prefix):] not in ARABIC_NOT_A_STEM:
            return len(prefix)
    return 0


def arabic_stem(word: str) -> str:
    """The Arabic `word` (normalised) without its prefix (ARABIC_PREFIXES); any other as it is."""
    return word[arabic_prefix(word):]


def arabic_stems(text: str) -> list[str]:
    """Of each Arabic word with a prefix in the normalised `text`, in order, the word
    without it: what the index also reads (search_text)."""
    return [word[cut:] for word in ARABIC_PREFIXED_WORD.findall(text) if (cut := arabic_prefix(word))]


def arabic_forms(term: str) -> list[str]:
    """The words a search `term` (folded) finds: itself, and an Arabic word with a prefix
    without it too."""
    cut = arabic_prefix(term) if ARABIC_WORD.fullmatch(term) else 0
    return [term, term[cut:]] if cut else [term]

# Hangul syllables and jamo. Korean is written with spaces, but a particle is written onto
# the word before it ("스시를": sushi, and the object's particle), and a compound is one
# word ("주간회의": the weekly meeting), so a Korean word typed is found at the start of a
# word and, of two syllables or more, inside one (hangul_parts, korean_stem).
HANGUL_WORD = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]+")
# Words of three syllables or more: those with an inner part of two or more.
HANGUL_LONG_WORD = re.compile(r"[\uac00-\ud7a3]{3,}")
# How many syllables of a Korean word an inner part starts within, and holds at most: a
# word longer than that (a sentence written without spaces) costs no more than it.
HANGUL_PART = 10
# Written before an inner part, so a search for one syllable, which looks for the start of
# a word, never reaches one: a digit, which both tokenizers keep in the word it begins
# and no Korean search term holds (korean_prefixes).
HANGUL_PART_MARK = "0"


def hangul_parts(text: str) -> list[str]:
    """The inner parts of the Korean words of `text` that the index also reads (marked), so
    that a search for the start of a word (a prefix, as particles follow the word) finds a
    word inside a compound too: of "주간회의록", "간회의록", "회의록" and "의록". From the
    second syllable on and two syllables at least: a syllable alone inside a word (집 in
    수집, 의 in 회의) is most often part of another word, and would flood the results."""
    return [HANGUL_PART_MARK + word[i:i + HANGUL_PART] for word in HANGUL_LONG_WORD.findall(text)
            for i in range(1, min(len(word) - 1, HANGUL_PART))]


def korean_prefixes(term: str) -> list[str]:
    """The starts of indexed words a Korean search `term` is found by: of a word, and of
    an inner part of one when it has two syllables or more."""
    return [term, HANGUL_PART_MARK + term] if len(term) > 1 else [term]


# Particles written onto a noun, longest first. A word typed with one ("회의는") is searched
# without it, so it finds the noun with any particle ("회의를", "회의에서"); only when two
# syllables or more are left, so a two-syllable noun that ends as a particle does (회의,
# 사과, 수도) is searched whole. What is left is the start of the word typed: whatever it
# found, it still finds.
KOREAN_PARTICLES = sorted(
    """에서는 에서도 에게는 으로는 에서 에게 한테 께서 으로 까지 부터 처럼 보다 이나 이랑
    하고 에는 에도 은 는 이 가 을 를 의 에 와 과 도 로 만""".split(),
    key=len, reverse=True,
)


def korean_stem(word: str) -> str:
    """`word`, of Korean syllables, without the particle written onto it; any other word as it is."""
    if len(word) >= 3 and HANGUL_LONG_WORD.fullmatch(word):
        for particle in KOREAN_PARTICLES:
            if word.endswith(particle) and len(word) - len(particle) >= 2:
                return word[:-len(particle)]
    return word


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
    words = search_terms(rest) + korean_syllables(rest)
    runs = [run for run in dict.fromkeys(UNSPACED_RUN.findall(text)) if letter_groups(run)]
    runs = runs[:max(MAX_TERMS - len(words), MAX_TERMS // 2)]
    return words[:MAX_TERMS - len(runs)] + runs


def korean_syllables(text: str) -> list[str]:
    """The Korean words of one syllable in `text` (책, 집), each once: whole words, where an
    English letter alone is not."""
    words = words_of(composed(text))
    return [w for w in dict.fromkeys(words) if len(w) == 1 and HANGUL_WORD.fullmatch(w)]


def scan_finds(content: str, term: str) -> bool:
    """Whether `content` holds `term` (one of message_terms' or memory_terms'), read as the
    full-text index reads it: where no index serves a search (another database), the rows
    are scanned with this, and find what the index finds in the forms a reader takes for
    one (accents, Greek, full-width, Korean particles and compounds). A run or a pair of
    letters written without spaces is found as neighbours; a Korean word at the start of a
    word or of an inner part of one; another word at the start of a word, by the start of
    its stem (the index's stemmer is not in Python: "leases" finds "lease"), an Arabic word
with or without its prefix (arabic_forms)."""
    words = words_of(fold(search_text(content) or content))  # Arabic words without their prefix too
    if UNSPACED_RUN.search(term) is not None:  # "寿司" typed, or a pair "寿 司"
        letters = [c for part in term.split() for group in letter_groups(part) for c in group]
        return any(words[i:i + len(letters)] == letters for i in range(len(words) - len(letters) + 1))
    if HANGUL_WORD.fullmatch(term):
        return any(w.startswith(prefix) for prefix in korean_prefixes(term) for w in words)
    stems = [form[:max(4, len(form) - 2)] for form in arabic_forms(term)]
    return any(w.startswith(stem) for stem in stems for w in words)


def owner_token(*, tenant_id: int, qor_id: int, user_id: int | None) -> str:
    """One indexed FTS5 token naming a memory's (tenant, qor, user), so a search reads only
    that owner's postings. Letters and digits only: the tokenizer keeps it whole."""
    return f"t{tenant_id}q{qor_id}u{user_id if user_id is not None else 'x'}"


