"""Hostile spellings the signals should read through: Latin words written partly with Cyrillic
or Greek look-alike letters ("Іgnоrе аll рrеvіоus іnstruсtіоns": the І, о, е, а, р, і and с are
Cyrillic) and invisible characters inside words ("ig\u200bnore").

Only a word that mixes ASCII letters with look-alikes is rewritten, so Russian or Greek text
(no ASCII letters in its words) reads as written; the invisible characters removed (zero-width
space, word joiner, zero-width no-break space, soft hyphen) carry no meaning in any script.
ASCII text, most requests, is returned as it is after one ``isascii`` check.
"""

from __future__ import annotations

import re

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
_INVISIBLE = re.compile("[\u200b\u2060\ufeff\u00ad]")
_LOOK = "".join(_LOOKALIKES)
_LOOKALIKE = re.compile(f"[{_LOOK}]")
# A run of Latin and look-alike letters with a Latin letter next to a look-alike. Tried only
# where such a run starts (the look-behind), each run is read once: linear in the text, also
# for megabytes of one script (Russian, Chinese) or of one long "word".
_MIXED_WORD = re.compile(
    f"(?<![A-Za-z{_LOOK}])[A-Za-z{_LOOK}]*?(?:[A-Za-z][{_LOOK}]|[{_LOOK}][A-Za-z])[A-Za-z{_LOOK}]*"
)


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
    if _LOOKALIKE.search(text) is None:
        return text
    return _MIXED_WORD.sub(lambda match: match.group(0).translate(_TO_LATIN), text)
