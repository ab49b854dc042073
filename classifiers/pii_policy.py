"""Where PII detection departs from Presidio's recognizers on purpose: hostile spellings of real
values are read as the values they are, and shapes that code, logs and documentation are full
of are not taken for someone's numbers.

Spellings (`normalize`): Unicode decimal digits (full-width, Arabic-Indic, Devanagari...) read as
ASCII digits, Unicode spaces (no-break, thin, ideographic) as a space and Unicode dashes as "-",
one character for one, so spans keep their offsets. "４１１１ １１１１ …" or a card copied with
no-break spaces is a card. Separators other than one space or dash are handled by the extra
card patterns in `classifiers.pii` (dots, slashes, runs of spaces, each used consistently).

Shapes (`Refiner.keep`), each decided on a finding with the context words around it:
- a card number is a card only at a length its network issues with its prefix: 16-digit
  runs starting with 1 are microsecond timestamps and 15-digit runs starting with 35 are IMEIs
  (one in ten of the first, every one of the second, passes the Luhn check);
- an unseparated card-length digit run without a card word, in a text holding several such
  runs, is an identifier column (order ids, trace ids): one in ten of those passes Luhn too;
- an SSN written with spaces or dots ("512 48 2210": tensor shapes, table columns) needs an SSN
  word nearby; the dashed form keeps Presidio's score;
- a card- or SSN-shaped number labelled as another identifier just before it ("IMEI", "part
  no.", "order #", "EAN", "tracking") with no card or SSN word nearby is that identifier;
- an API key that is a placeholder ("sk_test_xxxx…", "YOUR_KEY", "AKIAIOSFODNN7EXAMPLE"), a
  sample the vendors publish in their documentation or an `sk-` shaped slug of lower-case
  words is not a credential.
Published test card numbers and IBAN examples are still found: they are what people type when
they try a guard, and a prompt cannot show whether a number is someone's.
"""

from __future__ import annotations

import re
import sys
import unicodedata


def _spelling_table() -> dict[int, str]:
    table: dict[int, str] = {}
    for code in range(0x80, sys.maxunicode + 1):
        category = unicodedata.category(chr(code))
        if category == "Nd":
            table[code] = str(unicodedata.decimal(chr(code)))
        elif category == "Zs":
            table[code] = " "
    for dash in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d":
        table[ord(dash)] = "-"
    return table


_SPELLINGS = _spelling_table()


def normalize(text: str) -> str:
    """`text` with other digits, spaces and dashes spelled in ASCII; the same length, so
    every offset still points at the same character. ASCII text is returned as it is."""
    return text if text.isascii() else text.translate(_SPELLINGS)


# Unseparated card-length runs that make a text look like an identifier column.
_LONG_RUN = re.compile(r"(?<!\d)\d{13,19}(?!\d)")
ID_COLUMN_RUNS = 4
# Labels of other identifiers, read just before a card- or SSN-shaped number that has no card
# or SSN word of its own nearby (the recognizers' context words keep it otherwise).
LABEL_WINDOW_CHARS = 24
_IDENTIFIER_LABEL = re.compile(
    r"\b(?:imei|iccid|meid|siret|siren|ean|gtin|upc|isbn|issn|asin|sku|part|order|invoice|"
    r"tracking|serial|ticket|booking|reference|ref|lot|batch|barcode)\b[^0-9\n]{0,12}$",
    re.IGNORECASE)
# ... and, for an SSN's shape only, of what a 3-2-4 number also is ("shape 128-64-3200",
# "call 555-12-3456"); a card number is no phone number or shape
_SSN_SHAPE_LABEL = re.compile(
    r"\b(?:model|version|build|shapes?|dims|dimensions|tensor|call|phone|tel|telephone|fax|"
    r"mobile|cell)\b[^0-9\n]{0,12}$", re.IGNORECASE)
_GLUED_BEFORE = re.compile(r"[0-9][-./]$")
_GLUED_AFTER = re.compile(r"[-./][0-9]")
# Placeholder keys: a repeated filler character, or a word that says so.
_FILLER = re.compile(r"([xX*0.#_-])\1{7,}")
_PLACEHOLDER_WORDS = re.compile(
    r"example|your|replace|placeholder|changeme|dummy|sample|fake|redacted|insert|xxxx",
    re.IGNORECASE)
# A real key draws on dozens of characters; "sk_test_xxxx…" on five.
PLACEHOLDER_MAX_DISTINCT = 6
# Keys vendors print in their own documentation (Stripe's API reference, jwt.io's sample).
PUBLISHED_SAMPLE_KEYS = frozenset({
    "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "pk_test_TYooMQauvdEDq54NiTphI7jx",
})
_JWT_IO_PAYLOAD = "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIi"


class Refiner:
    """The shape checks above for one text (computed lazily, once per text)."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._long_runs: int | None = None

    def keep(self, entity: str, start: int, end: int, context: bool) -> bool:
        value = self._text[start:end]
        if entity in ("CREDIT_CARD", "US_SSN") and not context and self._labelled(start):
            return False
        if entity == "US_SSN" and not context and self._labelled(start, _SSN_SHAPE_LABEL):
            return False
        if entity == "CREDIT_CARD":
            return self._card(value, context)
        if entity == "US_SSN":
            return context or not (any(c in value for c in " .") or self._glued(start, end))
        if entity == "API_KEY":
            return not placeholder_key(value)
        return True

    def _glued(self, start: int, end: int) -> bool:
        """The number runs on into more digits through a dash, dot or slash ("ISBN
        978-960-16-4567-4", "1-800-555-12-3456"): a piece of a longer identifier."""
        return (_GLUED_BEFORE.search(self._text, max(0, start - 2), start) is not None
                or _GLUED_AFTER.match(self._text, end) is not None)

    def _labelled(self, start: int, label: re.Pattern[str] = _IDENTIFIER_LABEL) -> bool:
        """The number is labelled as another identifier just before it ("IMEI", "part no.",
        "order #", "EAN"): that label says what it is."""
        before = self._text[max(0, start - LABEL_WINDOW_CHARS) : start]
        return label.search(before) is not None

    def _card(self, value: str, context: bool) -> bool:
        digits = "".join(c for c in value if c.isdigit())
        if not issued_length(digits):
            return False
        if context or digits != value:
            return True
        if self._long_runs is None:
            self._long_runs = sum(1 for _ in _LONG_RUN.finditer(self._text))
        return self._long_runs < ID_COLUMN_RUNS


# Card networks' issuer prefixes and the lengths they issue (ISO/IEC 7812 ranges as the
# networks publish them); a Luhn-valid number outside them is some other identifier: IMEIs
# (15 digits, "35...", Luhn-valid by design), SIRETs, order numbers, timetables.
_ISSUED = (
    (re.compile(r"4"), (13, 16, 19)),                                   # Visa
    (re.compile(r"5[1-5]|222[1-9]|22[3-9]\d|2[3-6]\d\d|27[01]\d|2720"), (16,)),  # Mastercard
    (re.compile(r"3[47]"), (15,)),                                       # Amex
    (re.compile(r"30[0-5]|3095|36|3[89]"), (14, 15, 16, 17, 18, 19)),   # Diners
    (re.compile(r"6011|64[4-9]|65|62"), (16, 17, 18, 19)),               # Discover, UnionPay
    (re.compile(r"35"), (16, 17, 18, 19)),                               # JCB
    (re.compile(r"1800|2131|1"), (15,)),                                 # JCB 15, UATP
    (re.compile(r"5018|5020|5038|5893|6304|6759|676[1-3]"), tuple(range(12, 20))),  # Maestro
)


def issued_length(digits: str) -> bool:
    """Whether some card network issues numbers of this length with this prefix: the 16-digit
    runs starting with 1 (microsecond timestamps) and the 15-digit IMEIs are not cards."""
    return any(prefix.match(digits) and len(digits) in lengths for prefix, lengths in _ISSUED)


def placeholder_key(value: str) -> bool:
    """A key-shaped value that is filler, says it is an example, or is a published sample."""
    token = value.split()[-1]
    return (
        token in PUBLISHED_SAMPLE_KEYS
        or _FILLER.search(token) is not None
        or _PLACEHOLDER_WORDS.search(token) is not None
        or _JWT_IO_PAYLOAD in token
        or len({c for c in token if c.isalnum()}) <= PLACEHOLDER_MAX_DISTINCT
        or _slug(token)
    )


def _slug(token: str) -> bool:
    """An `sk-` shape in lower case ("sk-learn-pipelines-for-beginners-2024"): real OpenAI
    and Anthropic keys mix cases (20+ random characters with no capital: 1 in 50,000)."""
    return token.startswith("sk-") and not any(c.isupper() for c in token[3:])
