"""Numbers written so that no pattern over the text as written sees them whole, read rejoined:
digits that go on after a line break ("078-05-" and "1120" in two content parts or two
messages, which the router joins with a line break as vLLM's chat templates do; a card as
8 + 8 digits on two lines), and a number spelled one digit at a time ("4 1 1 1 1 1 ..."). A
piece is rejoined only where a card, SSN, IBAN or account word comes just before it: without
one, digits on consecutive lines are a table and spaced digits are a list. Also IBANs written
in lower case, which the IBAN pattern (upper case, as printed) does not read.
"""

from __future__ import annotations

import re

# a line break between a digit or dash and a digit, with the spaces around it
_BREAK = re.compile(r"(?<=[\d-])[ \t]*\r?\n[ \t]*(?=\d)")
# twelve or more single digits with one space between them
_DIGIT_BY_DIGIT = re.compile(r"(?<!\d)(?<!\d )\d(?: \d){11,18}(?! ?\d)")
_LOWER_IBAN = re.compile(r"\b[a-z]{2}\d{2}(?:[ ]?[a-z0-9]{4}){2,7}(?:[ ]?[a-z0-9]{1,3})?\b")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
CONTEXT_WORDS = ("card", "credit", "visa", "mastercard", "amex", "ssn", "social security",
                 "iban", "account", "acct", "bank", "tarjeta", "karte", "carte", "cartão")
CONTEXT_WINDOW_CHARS = 80


def rejoined(text: str, lowered: str) -> tuple[str, list[int]] | None:
    """``text`` with the pieces of named numbers joined, and for each of its characters the
    offset of the same character in ``text`` (one more entry: ``len(text)``); None when
    nothing was joined."""
    cuts: list[tuple[int, int]] = []
    for match in _BREAK.finditer(text):
        if _named(lowered, match.start()):
            cuts.append((match.start(), match.end()))
    for match in _DIGIT_BY_DIGIT.finditer(text):
        if _named(lowered, match.start()):
            cuts += [(i, i + 1) for i in range(match.start() + 1, match.end(), 2)]
    if not cuts:
        return None
    cuts.sort()
    kept: list[str] = []
    origin: list[int] = []
    position = 0
    for start, end in cuts:
        kept.append(text[position:start])
        origin.extend(range(position, start))
        position = max(position, end)
    kept.append(text[position:])
    origin.extend(range(position, len(text)))
    origin.append(len(text))
    return "".join(kept), origin


def upper_ibans(text: str) -> str | None:
    """``text`` with ASCII letters in upper case (same length), when it holds a lower-case
    IBAN shape; else None."""
    if _LOWER_IBAN.search(text) is None:
        return None
    return text.translate(_ASCII_UPPER)


def _named(lowered: str, at: int) -> bool:
    window = lowered[max(0, at - CONTEXT_WINDOW_CHARS) : at]
    return any(word in window for word in CONTEXT_WORDS)
