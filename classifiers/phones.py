"""Phone numbers by written shape and nearby words, beside libphonenumber's validity check.

`classifiers.pii` runs a libphonenumber recognizer, which only reports numbers valid in a
region's numbering plan: a number with an unassigned area code, or with an `x123` extension, is
dropped. `find_phones` adds numbers by shape; `judge` filters libphonenumber's matches with the
same rules. Constraints:

- Plain `re`, no libphonenumber call: this runs on the request hot path, after the cheap digit
  gate in `classifiers.pii`. Every unbounded repetition in a pattern starts with a mandatory
  separator, so no input makes a pattern backtrack badly.
- Without a phone word nearby, only shapes written for phone numbers and rarely for anything
  else count: a `+` or `00` country-code prefix; NANP `(NXX) NXX-XXXX`, `NXX-NXX-XXXX`,
  `NXX.NXX.XXXX`; a trunk-`0` national number with separators or its area code in parentheses
  (`0113 496 0123`, `01 23 45 67 89`, `(030) 1234567`); Brazil's `11 1234-5678`. A
  libphonenumber match needs a `+`, parentheses or two separators ("415-555-2671").
- A bare run of 10-12 digits (or digit groups joined by spaces or dashes) is a phone number only
  with a phone word at most `CONTEXT_BEFORE` characters before or `CONTEXT_AFTER` after it
  ("call", "text me", "mobile", "WhatsApp", "Telefon", "celular", ...). The one exception is a
  national number after its trunk prefix (`07911123456`, `0612345678`), unless it carries an
  ISBN-10 check digit. So a bare `4367094869` with no phone word nearby is not reported.
- Refused whatever the words around: a lone decimal, a list of small numbers (`2 3 4 5 6`), a
  number grouped in thousands (`7 800 000 000`) or ending in 00000, a date, a recent Unix
  timestamp (10 digits, `14…`-`19…`), a bit string, a placeholder (`5555555555`, `0123456789`),
  a number right after a word naming another kind of number (ISBN, order, invoice, account,
  ...) or right before a unit or count (`bytes`, `ms`, `parameters`, ...). Nothing matches
  inside a word, a decimal, a version string, an IP address or a longer digit run.
"""

from __future__ import annotations

import re

# How far (characters) a phone word may be from the number.
CONTEXT_BEFORE = 40
CONTEXT_AFTER = 30
# Base scores, before classifiers.pii's context boost (+0.35 with a phone word): a dialled shape
# scores above libphonenumber's 0.4 for a valid number; a bare run scores the same 0.4.
SHAPE_SCORE = 0.5
BARE_SCORE = 0.4

PHONE_CONTEXT = re.compile(
    r"\b(?:(?:cell|mobile|tele)?phones?|phoned|phoning|tel|cell|mobile|mob|landline|"
    r"call(?:s|ed|ing)?|ring(?:ing)?|rang|te?xt(?:s|ed|ing)?|sms|whatsapp|viber|"
    r"voice ?mail|dial(?:l?ed|ing)?|fax|hotline|helpline|contact|reach (?:me|us|him|her|them)|"
    r"(?:my|your|his|her|their|our|home|work|office) number|"
    # German, French, Portuguese, Spanish
    r"telefon\w*|handy\w*|rufnummer|anruf\w*|ruf mich|mobilnummer|festnetz|"
    r"t[ée]l[ée]phone|portable|appel(?:le|lez|er)?|telefone|celular|ligue|ligar|contato|"
    r"tel[ée]fono|m[óo]vil|llamar|ll[áa]mame)\b"
)
# A word naming another kind of number right before the value ("ISBN", "account number is").
OTHER_NUMBER = re.compile(
    r"\b(?:isbn|issn|doi|order|invoice|tracking|account|acct|iban|routing|serial|sku|upc|ean|"
    r"ticket|ref|reference|timestamp|epoch|unix|id|pnr|booking|confirmation|pin|otp|"
    r"zip|postcode|barcode|patent|konto\w*|kunden\w*|rechnung\w*|bestell\w*)"
    r"(?:\s*(?:number|no|num|is|was|[#:.=-]))*\s*$"
)
# A unit or count noun right after the value ("10737418240 bytes", "8030261248 parameters").
UNIT_AFTER = re.compile(
    r"\s*(?:[kmgt]i?b|bytes?|bits?|[mnµ]s|secs?|seconds?|mins?|minutes?|hours?|days?|years?|"
    r"km|cm|mm|kg|mg|ml|mol\w*|hz|people|users|rows|records|items|characters|chars|words|"
    r"tokens|param\w*|steps|samples|cells|atoms|molecules|copies|times|dollars|euros?|usd|eur|"
    r"inr|rupees|%)(?!\w)"
)
_OTHER_WINDOW = 30

_LEFT = r"(?<![\w+.\-/])"  # not inside a word, a decimal, a version or a longer number
_RIGHT = r"(?![\w+]|[.\-/]\d)"
_EXT = r"(?:\s?(?i:x|ext\.?|extension)\s?\d{1,6})?"
# (pattern, fewest digits, most digits); an extension's digits are not counted.
_SHAPES = tuple(
    (re.compile(_LEFT + pattern + _RIGHT), low, high)
    for pattern, low, high in (
        # +44 (0)113 496 0123, +1-415-555-2671x123, +911894002373
        (r"\+\d+(?:\s?\(\d{1,4}\)\s?\d+)?(?:[ .\-]\d+)*" + _EXT, 8, 16),
        # 0044 20 7946 0123, 001-415-555-2671 (not 0012345678, a zero-padded number)
        (r"00[1-9]\d{0,2}(?:[ .\-]\d+)+" + _EXT, 10, 17),
        # (415) 555-2671, 1-415-555-2671, 415.555.2671 (one separator throughout)
        (
            r"(?:1[ .\-]?)?(?:\([2-9]\d\d\)\s?[2-9]\d\d[ .\-]?\d{4}"
            r"|[2-9]\d\d(?P<sep>[.\-])[2-9]\d\d(?P=sep)\d{4})" + _EXT,
            10,
            11,
        ),
        # 0113 496 0123, 01 23 45 67 89, (0113) 4960123, 030/1234567
        (
            r"(?:\(0[1-9]\d{0,4}\)\s?\d{2,}|0[1-9]\d{0,4}[ \-/]\d{2,})(?:[ \-]\d{2,})*" + _EXT,
            10,
            12,
        ),
        # Brazil: 11 1234-5678, (11) 91234-5678
        (r"(?:\([1-9]\d\)\s?|[1-9]\d )9?\d{4}-\d{4}", 10, 11),
    )
)
_BARE = re.compile(_LEFT + r"(?:\d{10,12}|\(?\d{2,5}\)?\s?\d{2,8}(?:[ \-]\d{2,8}){0,3})" + _RIGHT)

_EXT_TAIL = re.compile(r"\s?(?i:x|ext\.?|extension)\s?\d+$")
_DECIMAL = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])")  # 0.994553: short foreign numbers
_THOUSANDS = re.compile(r"[1-9]\d{0,2}(?:[ ,.]\d{3})+")
_DATE = re.compile(  # at the start: 2023-11-30 ..., 30/11/2023 ..., 01 12 2023 ...
    r"(?:19|20)\d\d[ \-/.](?:0?[1-9]|1[0-2])[ \-/.]\d"
    r"|(?:0?[1-9]|[12]\d|3[01])[ \-/.](?:0?[1-9]|1[0-2])[ \-/.](?:19|20)\d\d"
)
_YEAR_RANGE = re.compile(r"\b((?:1[5-9]|20)\d\d)-((?:1[5-9]|20)\d\d)$")
_SEPARATOR = re.compile(r"\d[-. ]+\d")
# A bare national number after its trunk prefix 0 (07911123456, 0612345678, 03012345678).
_TRUNK_RUN = re.compile(r"0[1-9]\d{8,9}")
_DOTTED = re.compile(r"\+.*|(?:1\.)?\d{3}\.\d{3}\.\d{4}|(?:\d\d\.){4}\d\d")


def phone_context(lowered: str, start: int, end: int) -> bool:
    """Whether a phone word is near `lowered[start:end]` (`lowered` is the lower-cased text)."""
    before = lowered[max(0, start - CONTEXT_BEFORE) : start]
    return bool(
        PHONE_CONTEXT.search(before) or PHONE_CONTEXT.search(lowered[end : end + CONTEXT_AFTER])
    )


def _refused(lowered: str, start: int, end: int) -> bool:
    """Numbers that are not phone numbers whatever the words around them (see the docstring)."""
    value = _EXT_TAIL.sub("", lowered[start:end])
    groups = re.findall(r"\d+", value)
    digits = "".join(groups)
    if _DECIMAL.search(value) or _DATE.match(value) or _THOUSANDS.fullmatch(value):
        return True
    years = not value.startswith("+") and _YEAR_RANGE.search(value)  # "12 1990-1995"
    if sum(len(g) == 1 for g in groups) > 2 or (years and years[1] < years[2]):
        return True
    if value.isdigit() and len(value) == 10 and value[0] == "1" and value[1] >= "4":
        return True  # a Unix timestamp (2014-2033)
    if set(digits) <= {"0", "1"} or len(set(digits)) == 1 or digits.endswith("00000"):
        return True
    if digits in "01234567890" or digits in "98765432109876543210":
        return True
    return bool(
        OTHER_NUMBER.search(lowered[max(0, start - _OTHER_WINDOW) : start])
        or UNIT_AFTER.match(lowered, end)
    )


def judge(lowered: str, start: int, end: int) -> tuple[bool, bool]:
    """(keep, has phone context) for a libphonenumber match `lowered[start:end]`."""
    if _refused(lowered, start, end):
        return False, False
    context = phone_context(lowered, start, end)
    value = lowered[start:end].strip()
    groups = re.findall(r"\d+", value)
    dialled = value.startswith("+") or "(" in value
    if "." in value and not _DOTTED.fullmatch(value):
        return context, context  # "498.9126.37": dots, but not 415.555.2671 or 01.23.45.67.89
    if not dialled and len(_SEPARATOR.findall(value)) >= 2 and len(groups[-1]) >= 2:
        # "415-555-2671", "1-800-555-0199"; not "12 34 56 78 90", "0 25 50 75 100"
        lead_ok = len(groups[0]) >= 2 or groups[0] == "1"
        dialled = lead_ok and (value[0] == "0" or max(map(len, groups)) > 2)
    return context or dialled, context


def find_phones(text: str, lowered: str | None = None) -> list[tuple[int, int, float, bool]]:
    """(start, end, base score, has phone context) for phone-shaped spans; spans may overlap."""
    lowered = text.lower() if lowered is None else lowered
    found: list[tuple[int, int, float, bool]] = []
    for pattern, low, high in _SHAPES:
        for m in pattern.finditer(text):
            digits = sum(map(len, re.findall(r"\d+", _EXT_TAIL.sub("", m.group()))))
            if low <= digits <= high and not _refused(lowered, m.start(), m.end()):
                found.append((m.start(), m.end(), SHAPE_SCORE, phone_context(lowered, *m.span())))
    for m in _BARE.finditer(text):
        run = re.sub(r"\D", "", m.group())
        if not 10 <= len(run) <= 12 or _refused(lowered, m.start(), m.end()):
            continue
        context = phone_context(lowered, *m.span())
        if context or (_TRUNK_RUN.fullmatch(m.group()) and not _isbn10(run)):
            found.append((m.start(), m.end(), BARE_SCORE, context))
    return found


def _isbn10(digits: str) -> bool:
    """An ISBN-10 check digit (1 in 11 phone numbers passes it too; those need a phone word)."""
    return len(digits) == 10 and sum((10 - i) * int(d) for i, d in enumerate(digits)) % 11 == 0
