"""Regex-and-checksum recognizers for structured PII, with no NLP stack behind them.

`classifiers.pii` used presidio-analyzer's predefined pattern recognizers (without an NLP
model); importing that package pulls in spaCy, thinc and blis (about 3 s, 150 MiB and 2000
modules on top of torch and transformers). This module reimplements what those recognizers do
on a bare text, and must keep finding the same spans with the same scores:
`tests/classifiers/test_pii_parity.py` compares the two on a fixed corpus and generated texts.
Constraints that follow from that:

- Patterns run on the third-party `regex` engine (already required by transformers), not `re`:
  `\\w` and so `\\b` treat Unicode differently in the two (a combining mark is a word
  character only in `regex`), and Presidio used `regex`. Patterns compile once, with DOTALL,
  MULTILINE and IGNORECASE unless stated (the IBAN pattern is case-sensitive).
- A pattern match gets its pattern's base score; `validate` may set it to 1.0 (True) or drop
  the match (False); `invalidate` returning True drops it. Then, per recognizer, repeated spans
  and spans inside a kept span of at least their score are dropped (`drop_contained`).
- Presidio's quirks are kept, not fixed: IBANs must be upper-case and only need to start
  with their country's layout, the unspecified address "::" scores 0.1, SSNs in the 900-999
  area pass. Fixing one is a behaviour change to make on purpose, with the parity test.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import phonenumbers
import regex
import tldextract

DEFAULT_FLAGS = regex.DOTALL | regex.MULTILINE | regex.IGNORECASE
VALIDATED_SCORE = 1.0
PHONE_SCORE = 0.4  # every libphonenumber match, whatever its region


@dataclass(frozen=True)
class Span:
    """`text[start:end]` was recognized with confidence `score` (before any context boost)."""

    start: int
    end: int
    score: float


@dataclass(frozen=True)
class Pattern:
    name: str
    regex: str
    score: float


class Recognizer(Protocol):
    """What `classifiers.pii` needs of a recognizer: its entity, context words, spans."""

    @property
    def entity(self) -> str: ...

    @property
    def context(self) -> tuple[str, ...]: ...

    def analyze(self, text: str) -> list[Span]: ...


def drop_contained(spans: Iterable[Span]) -> list[Span]:
    """Distinct spans, minus any inside a kept span whose score is at least its own.

    A sweep by start offset (longest, then highest score, first at each start): only kept
    spans that reach the current start can contain it, so the others leave `reaching`.
    Returned highest score first (the order does not change what `classifiers.pii` reports)."""
    kept: list[Span] = []
    reaching: list[Span] = []
    for span in sorted(set(spans), key=lambda s: (s.start, s.start - s.end, -s.score)):
        if span.score <= 0:
            continue
        reaching = [k for k in reaching if k.end >= span.start]
        if any(k.start <= span.start and span.end <= k.end and span.score <= k.score
               for k in reaching):
            continue
        kept.append(span)
        reaching.append(span)
    return sorted(kept, key=lambda s: (-s.score, s.start, s.start - s.end))


class PatternRecognizer:
    """Named regex patterns for one entity, with optional validate / invalidate hooks.

    `validate(value)`: True sets the score to 1.0, False drops the match, None keeps the
    pattern's score. `invalidate(value)` True drops the match. `context` holds the words that
    raise a match's score when they appear shortly before it (`classifiers.pii` does that)."""

    def __init__(
        self,
        entity: str,
        patterns: Iterable[Pattern],
        context: Iterable[str] = (),
        validate: Callable[[str], bool | None] | None = None,
        invalidate: Callable[[str], bool] | None = None,
        flags: int = DEFAULT_FLAGS,
    ) -> None:
        self.entity = entity
        self.context = tuple(context)
        self.patterns = tuple(patterns)
        self._compiled = [(p, regex.compile(p.regex, flags)) for p in self.patterns]
        self._validate = validate
        self._invalidate = invalidate

    def analyze(self, text: str) -> list[Span]:
        spans: list[Span] = []
        for pattern, compiled in self._compiled:
            for match in compiled.finditer(text):
                start, end = match.span()
                if start < end:
                    score = self._score(text[start:end], pattern.score)
                    if score > 0:
                        spans.append(Span(start, end, score))
        return drop_contained(spans)

    def _score(self, value: str, score: float) -> float:
        verdict = self._validate(value) if self._validate is not None else None
        if verdict is not None:
            score = VALIDATED_SCORE if verdict else 0.0
        if self._invalidate is not None and self._invalidate(value):
            return 0.0
        return score


# --- credit cards -------------------------------------------------------------------------

# Issuer prefix 1, 3, 4, 6 or 50-55, then three groups; a 13-digit number starting with 1 is
# left out. Every match must also pass the Luhn check.
CARD_PATTERNS = (
    Pattern(
        "card_generic",
        r"\b(?!1\d{12}(?!\d))(?:[1346]\d{3}|5[0-5]\d{2})[- ]?\d{3,4}[- ]?\d{3,4}[- ]?\d{3,5}\b",
        0.3,
    ),
)
CARD_CONTEXT = ("credit", "card", "visa", "mastercard", "cc ", "amex", "discover", "jcb",
                "diners", "maestro", "instapayment")


def luhn_valid(number: str) -> bool:
    """The Luhn check over the digits of `number` (separators skipped)."""
    total = 0
    for i, char in enumerate(reversed([c for c in number if c.isdigit()])):
        digit = int(char)  # any Unicode decimal digit, as `\d` matched it
        if i % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def card_recognizer(extra: Iterable[Pattern] = ()) -> PatternRecognizer:
    return PatternRecognizer(
        "CREDIT_CARD", [*CARD_PATTERNS, *extra], CARD_CONTEXT, validate=luhn_valid
    )


# --- e-mail -------------------------------------------------------------------------------

_LOCAL_CHAR = r"[!#$%&'*+\-/=?^_`{|}~\w]"
_LOCAL_INNER = r"[!#$%&'*+\-/=?^_`{|}~\.\w]"
_DOMAIN_LABEL = r"\w+(?:-+\w+)*"  # inner hyphens allowed, punycode ("xn--...") included
EMAIL_PATTERN = Pattern(
    "email",
    rf"\b(?:{_LOCAL_CHAR}|{_LOCAL_CHAR}{_LOCAL_INNER}*{_LOCAL_CHAR})"
    rf"@{_DOMAIN_LABEL}(?:\.{_DOMAIN_LABEL})+\b",
    0.5,
)


def email_recognizer() -> PatternRecognizer:
    """Addresses whose domain ends in a public suffix (1.0); any other match is dropped.

    The suffix list is the snapshot bundled with tldextract (empty `suffix_list_urls`):
    the default extractor would download the public suffix list on first use."""
    offline = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

    def has_public_suffix(value: str) -> bool:
        return bool(offline(value).fqdn)

    return PatternRecognizer(
        "EMAIL_ADDRESS", [EMAIL_PATTERN], ("email",), validate=has_public_suffix
    )


# --- IP addresses -------------------------------------------------------------------------

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)"
_IPV4 = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_HEXTET = r"[0-9A-Fa-f]{1,4}"
_V6_PREFIX = r"(?:/(?:12[0-8]|1[01]\d|[1-9]?\d))"
_V6_FORMS = "|".join(
    [
        rf"(?:{_HEXTET}:){{7}}{_HEXTET}",  # all eight groups
        rf"(?:{_HEXTET}:){{1,7}}:",  # "::" at the end
        rf":(?::{_HEXTET}){{1,7}}",  # "::" at the start
        # "::" inside: k leading groups (6 down to 1), then 1 to 7-k trailing ones
        *(rf"(?:{_HEXTET}:){{1,{k}}}(?::{_HEXTET}){{1,{7 - k}}}" for k in range(6, 0, -1)),
    ]
)
IP_PATTERNS = (
    Pattern(
        "ipv4_mapped",
        rf"(?<![\w:])::(?:ffff(?::0{{1,4}})?:)?{_IPV4}{_V6_PREFIX}?\b",
        0.6,
    ),
    Pattern(
        "ipv4_embedded",
        rf"(?<![\w:])(?:(?:{_HEXTET}:){{1,5}}:(?:{_HEXTET}:){{0,4}}|(?:{_HEXTET}:){{6}})"
        rf"{_IPV4}{_V6_PREFIX}?\b",
        0.6,
    ),
    Pattern("ipv4", rf"\b{_IPV4}(?:/(?:[0-2]?\d|3[0-2]))?\b", 0.6),
    Pattern(
        "ipv6",
        rf"(?<![\w:])(?:{_V6_FORMS})(?:%[0-9a-zA-Z]+)?{_V6_PREFIX}?(?![\w:]|\.\d)",
        0.6,
    ),
    Pattern("ipv6_unspecified", rf"(?<![\w:])::{_V6_PREFIX}?(?![\w:])", 0.1),
)


def not_an_ip(value: str) -> bool:
    """True unless `value` parses as an address or interface (address/prefix)."""
    try:
        ipaddress.ip_interface(value)
    except ValueError:
        return True
    return False


def ip_recognizer() -> PatternRecognizer:
    return PatternRecognizer(
        "IP_ADDRESS", IP_PATTERNS, ("ip", "ipv4", "ipv6"), invalidate=not_an_ip
    )


# --- US social security numbers -------------------------------------------------------------

SSN_PATTERNS = (
    Pattern("ssn_5_4", r"\b[0-9]{5}-[0-9]{4}\b", 0.05),
    Pattern("ssn_3_6", r"\b[0-9]{3}-[0-9]{6}\b", 0.05),
    Pattern("ssn_dashed", r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b", 0.05),
    Pattern("ssn_bare", r"\b[0-9]{9}\b", 0.05),
    Pattern("ssn_grouped", r"\b[0-9]{3}[- .][0-9]{2}[- .][0-9]{4}\b", 0.5),
)
SSN_CONTEXT = ("social", "security", "ssn", "ssns", "ssid")
# Published sample numbers (the Woolworth wallet card among them): examples, not someone's SSN.
SSN_SAMPLES = frozenset({"123456789", "987654320", "078051120"})


def not_an_ssn(value: str) -> bool:
    """Numbers the SSA never issues, samples, and mixed separators ("123-45 6789")."""
    if len({c for c in value if c in "-. "}) > 1:
        return True
    digits = "".join(c for c in value if c.isdigit())
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return (
        len(set(digits)) == 1
        or group == "00"
        or serial == "0000"
        or area in ("000", "666")
        or digits in SSN_SAMPLES
    )


def ssn_recognizer() -> PatternRecognizer:
    return PatternRecognizer("US_SSN", SSN_PATTERNS, SSN_CONTEXT, invalidate=not_an_ssn)


# --- phone numbers ------------------------------------------------------------------------


class PhoneRecognizer:
    """libphonenumber's matcher over each region, at its VALID leniency (numbers that fit a
    region's numbering plan; `+<country code>` numbers in any pass), all scored 0.4."""

    entity = "PHONE_NUMBER"
    context = ("phone", "number", "telephone", "cell", "cellphone", "mobile", "call")

    def __init__(self, regions: Iterable[str]) -> None:
        self.regions = tuple(regions)

    def analyze(self, text: str) -> list[Span]:
        spans = [
            Span(match.start, match.end, PHONE_SCORE)
            for region in self.regions
            for match in phonenumbers.PhoneNumberMatcher(
                text, region, leniency=phonenumbers.Leniency.VALID
            )
        ]
        return drop_contained(spans)


# --- IBAN ---------------------------------------------------------------------------------

# Country code, two check digits, then 2-6 groups of four, optionally one more group of four
# and a 1-3 character tail; groups may be joined by one space or dash. Case-sensitive.
IBAN_PATTERN = regex.compile(
    r"(?<![A-Z0-9])([A-Z]{2}[0-9]{2}(?:[ -]?[A-Z0-9]{4}){2,6})"
    r"((?:[ -]?[A-Z0-9]{4})?)((?:[ -]?[A-Z0-9]{1,3})?)(?![A-Z0-9])",
    regex.DOTALL | regex.MULTILINE,
)
IBAN_SCORE = 1.0  # only checksum- and format-valid IBANs are reported
IBAN_CONTEXT = ("iban", "bank", "transaction")
# The account part (BBAN) after "CCkk", per country: runs of n (digit), a (upper-case
# letter) or c (letter or digit); a bare "0" is that digit. The text must start with this
# layout (a longer text passes if its checksum holds).
IBAN_LAYOUTS = {
    "AD": "8n 12c", "AE": "19n", "AL": "8n 16c", "AT": "16n", "AZ": "4c 20n", "BA": "16n",
    "BE": "12n", "BG": "4a 6n 8c", "BH": "4a 14c", "BR": "23n 1a 1c", "BY": "4c 4n 16c",
    "CH": "5n 12c", "CR": "0 17n", "CY": "8n 16c", "CZ": "20n", "DE": "18n", "DK": "14n",
    "DO": "4a 20n", "EE": "16n", "EG": "25n", "ES": "20n", "FI": "14n", "FO": "14n",
    "FR": "10n 11c 2n", "GB": "4a 14n", "GE": "2c 16n", "GI": "4a 15c", "GL": "14n",
    "GR": "7n 16c", "GT": "24c", "HR": "17n", "HU": "24n", "IE": "4c 14n", "IL": "19n",
    "IQ": "4a 15n", "IS": "22n", "IT": "1a 10n 12c", "JO": "4a 22n", "KW": "4a 22c",
    "KZ": "3n 13c", "LB": "4n 20c", "LC": "4a 24c", "LI": "5n 12c", "LT": "16n", "LU": "3n 13c",
    "LV": "4a 13c", "LY": "21n", "MC": "10n 11c 2n", "MD": "20c", "ME": "18n", "MK": "3n 10c 2n",
    "MR": "23n", "MT": "4a 5n 18c", "MU": "4a 19n 1a", "NL": "4a 10n", "NO": "11n",
    "PK": "4c 16n", "PL": "24n", "PS": "4c 17n", "PT": "17n", "QA": "4a 17c", "RO": "4a 16c",
    "RS": "18n", "SA": "2n 18c", "SC": "4a 20n 3a", "SE": "20n", "SI": "15n", "SK": "20n",
    "SM": "1a 10n 12c", "TL": "19n", "TN": "20n", "TR": "5n 17c", "UA": "6n 19c", "VA": "18n",
    "VG": "4c 16n", "XK": "16n",
}
_CHAR_KINDS: dict[str, Callable[[str], bool]] = {
    "n": lambda c: "0" <= c <= "9",
    "a": lambda c: "A" <= c <= "Z",
    "c": lambda c: c.isascii() and c.isalnum(),
    "0": lambda c: c == "0",
}


def _expand(layout: str) -> str:
    """One kind letter per character: layout "4a 2n" is "aaaann"."""
    return "".join(t if t == "0" else t[-1] * int(t[:-1]) for t in layout.split())


class IbanRecognizer:
    """IBANs with a valid mod-97 check and their country's layout, compact or grouped."""

    entity = "IBAN_CODE"
    context = IBAN_CONTEXT

    def __init__(self) -> None:
        self._layouts = {cc: _expand(layout) for cc, layout in IBAN_LAYOUTS.items()}

    def analyze(self, text: str) -> list[Span]:
        """One span per pattern match: the longest of (whole match, without the 1-3 character
        tail, without the extra group too) that is a valid IBAN, so "DE89...3000 2 days"
        yields the IBAN without the " 2"."""
        spans: list[Span] = []
        for match in IBAN_PATTERN.finditer(text):
            start = match.start()
            for end in (match.end(3), match.end(2), match.end(1)):
                if self.valid(text[start:end]):
                    spans.append(Span(start, end, IBAN_SCORE))
                    break
        return spans

    def valid(self, value: str) -> bool:
        iban = value.replace("-", "").replace(" ", "").upper()
        layout = self._layouts.get(iban[:2])
        if layout is None or iban[2:4] != check_digits(iban):
            return False
        bban = iban[4:]
        return len(bban) >= len(layout) and all(
            _CHAR_KINDS[kind](char) for kind, char in zip(layout, bban, strict=False)
        )


def check_digits(iban: str) -> str:
    """The two ISO 7064 mod-97 check digits for `iban` (its own check digits are ignored)."""
    moved = iban[4:] + iban[:2] + "00"  # country code and "00" to the end
    number = int("".join(str(int(char, 36)) for char in moved))  # A=10 ... Z=35
    return f"{98 - number % 97:02d}"
