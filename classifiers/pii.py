"""Structured PII detection with regex-and-checksum recognizers, without an NLP model.

E-mail, phone, credit card (Luhn), US SSN, IBAN (checksum) and IP address come from
`classifiers.pii_recognizers`, our own versions of presidio-analyzer's predefined pattern
recognizers with the same spans and scores (tests/classifiers/test_pii_parity.py checks them
against Presidio where it is installed); nothing here imports presidio or spaCy. The card
patterns add Mastercard's 2-series, 19-digit Visa, 15-digit JCB and Maestro to Presidio's. An
API-key recognizer covers vendor token formats and `Bearer` headers. Phone numbers
libphonenumber rejects (unassigned area codes, `x123` extensions) are added by shape, and bare
digit runs next to a phone word, by `classifiers.phones`, which also drops numbers in prose that
a numbering plan happens to accept. Construct the detector at start-up (it compiles patterns and
loads tldextract's suffix list), never per request.

What Presidio's AnalyzerEngine would add with a spaCy model is reproduced cheaply: the context
boost (a recognizer's context words within a short window before a match raise its score, as
Presidio's LemmaContextAwareEnhancer does with its default factors; phone words count on either
side of a number) and overlap resolution (keep the higher-scoring of two overlapping findings).

Prompts that only talk about formats ("how does the Luhn check work?") produce no findings:
every finding needs a value that matches a pattern and passes its validator.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

from classifiers import phones, ssn
from classifiers.national_ids import NationalIdRecognizer
from classifiers.pii_policy import Refiner, normalize
from classifiers.pii_recognizers import (
    IbanRecognizer,
    Pattern,
    PatternRecognizer,
    PhoneRecognizer,
    Recognizer,
    card_recognizer,
    email_recognizer,
    ip_recognizer,
    ssn_recognizer,
)
from classifiers.pii_split import rejoined, upper_ibans
from classifiers.scan import CHUNK_CHARS, ScanBudget, windows

ENTITY_TYPES: tuple[str, ...] = (
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "US_SSN",
    "IBAN_CODE",
    "IP_ADDRESS",
    "API_KEY",
)
# Beyond Presidio's defaults, asked for by name only: other countries' identity numbers
EXTRA_ENTITY_TYPES: tuple[str, ...] = ("NATIONAL_ID",)
# Presidio's defaults (context_similarity_factor, min_score_with_context_similarity).
CONTEXT_BOOST = 0.35
MIN_SCORE_WITH_CONTEXT = 0.4
CONTEXT_WINDOW_CHARS = 40
DEFAULT_MIN_SCORE = 0.4

# (name, regex, score): well-known vendor token shapes. Lengths follow the vendors' documented
# formats; anything shorter is more likely prose or a placeholder ("sk-...") than a credential.
API_KEY_PATTERNS: tuple[tuple[str, str, float], ...] = (
    ("openai_or_anthropic", r"\bsk-(?:proj-|ant-(?:api\d\d-)?)?[A-Za-z0-9_-]{20,}", 0.9),
    ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b", 0.95),
    ("aws_access_key_id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", 0.9),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}\b", 0.9),
    ("slack_token", r"\bxox[abposr]-[0-9A-Za-z-]{10,}\b", 0.9),
    ("stripe_key", r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}\b", 0.9),
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}\b", 0.9),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", 0.9),
    ("bearer_token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*", 0.8),
)
MASTERCARD_2_SERIES = (
    r"\b2(?:22[1-9]|2[3-9]\d|[3-6]\d{2}|7[01]\d|720)[- ]?\d{4}[- ]?\d{4}[- ]?\d{4}\b"
)
# Card shapes Presidio's pattern misses: 19-digit Visa, 15-digit JCB (2131/1800) and Maestro
# (12-19 digits on its issuer prefixes). The recognizer still Luhn-checks every match.
EXTRA_CARD_PATTERNS = (
    ("visa_19", r"\b4\d{3}(?:[- ]?\d{4}){3}[- ]?\d{3}\b"),
    ("jcb_15", r"\b(?:2131|1800)[- ]?\d{4}[- ]?\d{4}[- ]?\d{3}\b"),
    ("maestro", r"\b(?:5018|5020|5038|5893|6304|6759|676[1-3])\d{8,15}\b"),
)
# Beyond Presidio (classifiers.pii_policy): cards grouped with dots, slashes, underscores,
# tabs, line breaks, runs of spaces or " - ", the same separator throughout (4-4-4-4,
# 4-4-4-4-3, Amex 4-6-5), and a bare number glued to words ("card4111...", "...1111exp").
# Groups broken over lines in other ways are read rejoined (classifiers.pii_split).
_SEPARATOR = r"(?P<sep>[ \t\n._/]{1,3}| - )"
SEPARATED_CARD_PATTERNS = (
    ("separated_16_19", rf"\b[2-6]\d{{3}}{_SEPARATOR}\d{{4}}(?P=sep)\d{{4}}(?P=sep)\d{{4}}"
                        rf"(?:(?P=sep)\d{{3}})?\b"),
    ("separated_amex", rf"\b3[47]\d{{2}}{_SEPARATOR}\d{{6}}(?P=sep)\d{{5}}\b"),
    ("glued", r"(?<!\d)(?:4\d{15}(?:\d{3})?|5[1-5]\d{14}|2[2-7]\d{14}|3[47]\d{13}|6\d{15})"
              r"(?!\d)"),
)
API_KEY_CONTEXT = ("api", "key", "token", "secret", "bearer", "authorization", "credential")


@dataclass(frozen=True)
class PiiFinding:
    """One detected span: `text[start:end]` is an `entity_type` value with confidence `score`."""

    entity_type: str
    start: int
    end: int
    score: float


# Cheap gate before libphonenumber's matcher (its cost grows with regions x text length) and
# classifiers.phones: a phone number needs at least 7 digits in one run of digits and dialling
# punctuation.
_PHONE_CANDIDATE = re.compile(r"(?:\d[\s().+/-]{0,3}){7,}")
# National formats are parsed per region; "+<country code>" numbers are found in any pass.
# (Presidio's own default list has "UK" and "FE", which libphonenumber does not know.)
PHONE_REGIONS = ("US", "GB", "DE", "FR", "IN", "BR")


def _has_mixed_chars(value: str) -> bool:
    """Real tokens mix letters and digits; `Bearer abcdefghijklmnopq` in prose does not."""
    token = value.split()[-1]
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def _build_recognizers(
    entity_types: Collection[str], presidio_compatible: bool
) -> list[Recognizer]:
    """Recognizers for the requested entity types, in the order requested (API_KEY last)."""

    def validate_api_key(value: str) -> bool | None:
        if value.lower().startswith("bearer"):
            return _has_mixed_chars(value)
        return None  # vendor prefixes are specific enough; keep the pattern's score

    def card() -> Recognizer:
        # Presidio's card pattern predates Mastercard's 2221-2720 range (issued since 2017)
        # and misses a few other shapes; the added ones are Luhn-checked like the rest.
        extra = [Pattern("mastercard_2_series", MASTERCARD_2_SERIES, 0.3)]
        extra += [Pattern(name, regex, 0.3) for name, regex in EXTRA_CARD_PATTERNS]
        if not presidio_compatible:
            extra += [Pattern(name, regex, 0.3) for name, regex in SEPARATED_CARD_PATTERNS]
        return card_recognizer(extra)

    available: dict[str, Callable[[], Recognizer]] = {
        "EMAIL_ADDRESS": email_recognizer,
        "PHONE_NUMBER": lambda: PhoneRecognizer(PHONE_REGIONS),
        "CREDIT_CARD": card,
        "US_SSN": ssn_recognizer,
        "IBAN_CODE": IbanRecognizer,
        "IP_ADDRESS": ip_recognizer,
        "NATIONAL_ID": NationalIdRecognizer,
        "API_KEY": lambda: PatternRecognizer(
            "API_KEY",
            [Pattern(name, regex, score) for name, regex, score in API_KEY_PATTERNS],
            API_KEY_CONTEXT,
            validate=validate_api_key,
        ),
    }
    # API_KEY last, as before: order decides between equal findings of two types.
    ordered = [name for name in entity_types if name != "API_KEY"]
    ordered += ["API_KEY"] if "API_KEY" in entity_types else []
    return [available[name]() for name in ordered]


class PiiDetector:
    """Detect structured PII in a text; construct once at start-up, call `detect` per request.

    `entity_types=None` means all of `ENTITY_TYPES` (Presidio's; `EXTRA_ENTITY_TYPES` only
    when named); unknown names raise `ValueError`.
    Findings below `min_score` (after the context boost) are dropped. Thread-safe: `detect`
    keeps no state between calls. `presidio_compatible=True` leaves out what
    `classifiers.pii_policy` changes (the parity test's mode; never the router's).
    """

    def __init__(
        self,
        entity_types: Collection[str] | None = None,
        min_score: float = DEFAULT_MIN_SCORE,
        chunk_chars: int = CHUNK_CHARS,
        *,
        presidio_compatible: bool = False,
    ) -> None:
        chosen = tuple(ENTITY_TYPES if entity_types is None else entity_types)
        unknown = sorted(set(chosen) - set(ENTITY_TYPES) - set(EXTRA_ENTITY_TYPES))
        if unknown:
            raise ValueError(f"unknown PII entity types {unknown}; known: "
                             f"{[*ENTITY_TYPES, *EXTRA_ENTITY_TYPES]}")
        self.entity_types: tuple[str, ...] = chosen
        self.min_score = min_score
        self.chunk_chars = chunk_chars
        self._policy = not presidio_compatible
        self._recognizers = _build_recognizers(chosen, presidio_compatible)

    def detect(self, text: str, budget: ScanBudget | None = None) -> tuple[PiiFinding, ...]:
        """Non-overlapping findings in `text`, ordered by start offset.

        A text longer than `chunk_chars` is scanned in overlapping windows
        (`classifiers.scan`), with the same findings as one pass over it: `budget`, when
        given, is checked before each window and raises `ClassifierTimeout` or
        `ScanCancelled` to stop the scan."""
        if not text:
            return ()
        if len(text) <= self.chunk_chars:
            if budget is not None:
                budget.check()
            return _resolve_overlaps(self._candidates(text))
        candidates: list[PiiFinding] = []
        for part in windows(text, self.chunk_chars):
            if budget is not None:
                budget.check()
            offset = part.start
            for found in self._candidates(text[part.start : part.end]):
                start = found.start + offset
                if part.own_start <= start < part.own_end:  # each span from one window only
                    candidates.append(
                        PiiFinding(found.entity_type, start, found.end + offset, found.score))
        return _resolve_overlaps(candidates)

    def _candidates(self, text: str) -> list[PiiFinding]:
        """Every finding at or above `min_score` in `text`, overlapping ones included; with
        the policy, also those of the named numbers rejoined and of lower-case IBANs
        (`classifiers.pii_split`), at their offsets in `text`."""
        if not self._policy:
            return self._scan(text)
        text = normalize(text)  # same length: offsets hold
        candidates = self._scan(text)
        joined = rejoined(text, text.lower())
        if joined is not None:
            rejoined_text, origin = joined
            candidates += [
                PiiFinding(f.entity_type, origin[f.start], origin[f.end - 1] + 1, f.score)
                for f in self._scan(rejoined_text)
            ]
        upper = upper_ibans(text) if "IBAN_CODE" in self.entity_types else None
        if upper is not None:
            candidates += self._scan(upper, only="IBAN_CODE")
        return candidates

    def _scan(self, text: str, only: str | None = None) -> list[PiiFinding]:
        """`_candidates` of one text as written (`only`: of that entity type alone)."""
        refiner = Refiner(text) if self._policy else None
        lowered = text.lower()
        types = self.entity_types if only is None else (only,)
        gate = "PHONE_NUMBER" in types and bool(_PHONE_CANDIDATE.search(text))
        candidates: list[PiiFinding] = []
        for recognizer in self._recognizers:
            entity = recognizer.entity
            if (entity == "PHONE_NUMBER" and not gate) or entity not in types:
                continue
            for found in recognizer.analyze(text):
                if entity == "PHONE_NUMBER":
                    # Numbers in prose that some numbering plan accepts are dropped here.
                    keep, context = phones.judge(lowered, found.start, found.end)
                    if not keep:
                        continue
                else:
                    window = lowered[max(0, found.start - CONTEXT_WINDOW_CHARS) : found.start]
                    context = any(word in window for word in recognizer.context)
                    if refiner and not refiner.keep(entity, found.start, found.end, context):
                        continue
                candidates.append(
                    self._finding(entity, found.start, found.end, found.score, context)
                )
        if "US_SSN" in types:
            candidates += self._labelled_ssns(text)
        if gate:  # dialled shapes libphonenumber rejects, bare runs next to a phone word
            for start, end, score, context in phones.find_phones(text, lowered):
                candidates.append(self._finding("PHONE_NUMBER", start, end, score, context))
        return [c for c in candidates if c.score >= self.min_score]

    def _labelled_ssns(self, text: str) -> list[PiiFinding]:
        """Placeholders Presidio drops, when disclosed as someone's number; with the policy,
        also a bare nine-digit run right after "SSN" (``classifiers.ssn``)."""
        spans = list(ssn.disclosed_placeholders(text))
        if self._policy:
            spans += ssn.labelled_bare_numbers(text)
        return [self._finding("US_SSN", start, end, ssn.SCORE, False) for start, end in spans]

    @staticmethod
    def _finding(entity_type: str, start: int, end: int, score: float, context: bool) -> PiiFinding:
        if context:
            score = min(1.0, max(score + CONTEXT_BOOST, MIN_SCORE_WITH_CONTEXT))
        return PiiFinding(entity_type, start, end, round(score, 4))


def _resolve_overlaps(candidates: list[PiiFinding]) -> tuple[PiiFinding, ...]:
    """Greedy: highest score first (then longest span); drop anything overlapping a kept one.

    Kept spans never overlap, so sorted by start they are sorted by end too: a candidate
    overlaps one of them iff the last kept span starting before its end ends after its start
    (a bisection, not a scan of every kept span: texts with many values stay linear-ish)."""
    kept: list[PiiFinding] = []
    starts: list[int] = []
    ends: list[int] = []
    for finding in sorted(candidates, key=lambda f: (-f.score, f.start - f.end, f.start)):
        index = bisect.bisect_left(starts, finding.end)
        if index and ends[index - 1] > finding.start:
            continue
        kept.append(finding)
        starts.insert(index, finding.start)
        ends.insert(index, finding.end)
    return tuple(sorted(kept, key=lambda f: f.start))
