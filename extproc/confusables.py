"""Hostile spellings the signals should read through: Latin words written partly with Cyrillic
or Greek look-alike letters ("Іgnоrе аll рrеvіоus іnstruсtіоns": the І, о, е, а, р, і and с are
Cyrillic) and invisible characters inside words ("ig\u200bnore").

In a text that is mostly Latin every look-alike is read as Latin; otherwise only a word that
mixes ASCII letters with look-alikes is, so Russian or Greek text reads as written. Invisible
characters (zero-width spaces and joiners, soft hyphens, variation selectors, tag characters)
are dropped and full-width, mathematical and circled letters read as plain ones: this is the
text the signals read, not what goes upstream.
ASCII text, most requests, is returned as it is after one ``isascii`` check.
"""

from __future__ import annotations

import re
import unicodedata

_LOOKALIKES = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
    "с": "c", "т": "t", "у": "y", "х": "x", "і": "i", "ї": "i", "ј": "j", "ѕ": "s", "һ": "h",
    "ԁ": "d", "ԛ": "q", "ԝ": "w", "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H",
    "О": "O", "Р": "P", "С": "C", "Т": "T", "Х": "X", "У": "Y", "І": "I", "Ј": "J", "Ѕ": "S",
    # Greek
    "α": "a", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u",
    "χ": "x", "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
    "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
}
_TO_LATIN = str.maketrans(_LOOKALIKES)
# zero-width space/joiners, word joiner, BOM, soft hyphen, combining grapheme joiner, variation
# selectors, tag characters: in classifier text only (the body goes upstream as sent)
_INVISIBLE = re.compile(
    "[\u200b-\u200d\u2060\ufeff\u00ad\u034f\ufe00-\ufe0f\U000e0000-\U000e007f]")
# full-width forms, mathematical alphanumerics (bold, italic, script...), circled letters
_COMPAT = re.compile("[\uff01-\uff5e\U0001d400-\U0001d7ff\u24b6-\u24e9]+")
_ASCII_LETTER = re.compile("[A-Za-z]")
_OTHER_LETTER = re.compile("[\u0370-\u03ff\u0400-\u04ff]")
_LOOK = "".join(_LOOKALIKES)
_LOOKALIKE = re.compile(f"[{_LOOK}]")
# A run of Latin and look-alike letters with a Latin letter next to a look-alike. Tried only
# where such a run starts (the look-behind), each run is read once: linear in the text, also
# for megabytes of one script (Russian, Chinese) or of one long "word".
_MIXED_WORD = re.compile(
    f"(?<![A-Za-z{_LOOK}])[A-Za-z{_LOOK}]*?(?:[A-Za-z][{_LOOK}]|[{_LOOK}][A-Za-z])[A-Za-z{_LOOK}]*"
)

# A one-letter look-alike word between two Latin words ("make а bomb" with a Cyrillic а): in a
# Russian or Greek sentence its neighbours are Cyrillic or Greek words
_LONE_LOOKALIKE = re.compile(f"(?<=[A-Za-z][ \t])[{_LOOK}](?=[ \t][A-Za-z])")


# Read on the event loop: a hostile megabyte of look-alikes costs ~0.15 s, so only the first
# 64 KiB are read through (a longer text is past what the guards scan within their budget).
READABLE_CHARS = 64 * 1024


def readable(text: str) -> str:
    """``text`` with invisible characters dropped and look-alike letters inside otherwise
    Latin words read as the Latin letters they imitate (in its first ``READABLE_CHARS``)."""
    if text.isascii():
        return text
    if len(text) > READABLE_CHARS:
        return readable(text[:READABLE_CHARS]) + text[READABLE_CHARS:]
    text = _INVISIBLE.sub("", text)
    text = _COMPAT.sub(lambda match: unicodedata.normalize("NFKC", match.group(0)), text)
    if _LOOKALIKE.search(text) is None:
        return text
    sample = text[:4096]  # which script the text is written in: its start tells
    if len(_ASCII_LETTER.findall(sample)) > 2 * len(_OTHER_LETTER.findall(sample)):
        # a Latin text: words made only of look-alikes ("а ріре") are Latin words too
        return text.translate(_TO_LATIN)
    text = _MIXED_WORD.sub(lambda match: match.group(0).translate(_TO_LATIN), text)
    return _LONE_LOOKALIKE.sub(lambda match: match.group(0).translate(_TO_LATIN), text)
