"""Compiled, frozen signal definitions.

Keyword patterns are compiled once here (one alternation per ``any`` signal) so the hot path
only runs ``re.search``. Learned signals only carry what the classifier engine needs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from classifiers.scan import ScanBudget, Window, windows
from extproc.decision import SignalResult
from extproc.signals.literals import LiteralGate, literal_gate
from extproc.signals.obfuscation import deobfuscated
from extproc.signals.trie import trie_source

# Keyword signals read texts longer than this in budgeted chunks on a thread (KeywordSpec.scan)
KEYWORD_INLINE_CHARS = 16 * 1024  # the embedded defaults' lists read ~1 µs a character
# Their chunks: small, as a search holds the interpreter for a whole chunk (an 8 KiB chunk of
# digit groups takes the default code keywords about 5 ms), overlapping by more than any
# keyword's length (config: at most 512 characters)
KEYWORD_CHUNK_CHARS = 8 * 1024
KEYWORD_OVERLAP_CHARS = 1024


@dataclass(frozen=True, slots=True)
class KeywordSpec:
    name: str
    on_error: str
    patterns: tuple[re.Pattern[str], ...]
    match_all: bool
    text_source: str | None = None
    fold: bool = False
    """The patterns were compiled case-sensitively from casefolded keywords
    (``casefold_safe``): the text is casefolded before matching."""
    gate: LiteralGate | None = None
    """For ``any`` over regexes: one of the literals every match needs (``literals``); a text
    without any is not searched further."""

    read_obfuscated: bool = False
    """Also search the text's obfuscated reading (``extproc.signals.obfuscation``: leetspeak
    and spelled-out letters as words, encoded payloads decoded) when the text itself has no
    match."""

    def evaluate(self, text: str) -> SignalResult:
        label = self._first(fold_case(text) if self.fold else text)
        if label is None and self.read_obfuscated:
            label = self._first_obfuscated(text)
        return _keyword_result(self.name, label)

    def _first_obfuscated(self, text: str) -> str | None:
        """``_first`` over the obfuscated spellings of ``text`` read as words (decoded
        before folding: base64 is case-sensitive)."""
        plain = deobfuscated(text)
        if plain is None:
            return None
        return self._first(fold_case(plain) if self.fold else plain)

    def _first(self, text: str) -> str | None:
        """The first match's text (all: of the first pattern, once every one matches)."""
        first = (self.patterns[0].search(text) if self.gate is None
                 else self.gate.search(text))
        # match all: the others are searched only while every one matches
        if (first is not None and self.match_all
                and not all(p.search(text) for p in self.patterns[1:])):
            first = None
        return first.group(0) if first is not None else None

    def scan(self, text: str, budget: ScanBudget | None) -> SignalResult:
        """``evaluate`` for a long text, chunk by chunk (``classifiers.scan.windows``, whose
        cuts fall on whitespace, of ``KEYWORD_CHUNK_CHARS`` overlapping by
        ``KEYWORD_OVERLAP_CHARS``), checking ``budget`` before each chunk: Python's regex
        engine holds the interpreter for a whole search, and an 8 MiB prompt would hold the
        event loop for seconds. Same result as
        ``evaluate`` for keywords, and for regexes whose matches and lookarounds stay within
        the overlap (a chunk's search sees its window's end as the text's end). With
        ``read_obfuscated``, a text without a match is then read again chunk by chunk, each
        chunk's obfuscated spellings read as words (``all``: every keyword in one chunk)."""
        original = text
        if self.fold:
            text = fold_case(text)
        chunks = windows(text, KEYWORD_CHUNK_CHARS, KEYWORD_OVERLAP_CHARS)
        result = self._scan(text, chunks, budget)
        if result.matched or not self.read_obfuscated:
            return result
        for window in windows(original, KEYWORD_CHUNK_CHARS, KEYWORD_OVERLAP_CHARS):
            if budget is not None:
                budget.check()
            label = self._first_obfuscated(original[window.start : window.end])
            if label is not None:
                return _keyword_result(self.name, label)
        return result

    def _scan(
        self, text: str, chunks: tuple[Window, ...], budget: ScanBudget | None
    ) -> SignalResult:
        firsts: list[str | None] = []
        for pattern in self.patterns:
            found = None
            for window in chunks:
                if budget is not None:
                    budget.check()
                if self.gate is not None and not self.gate.admits(text, window.start,
                                                                  window.end):
                    continue
                for match in pattern.finditer(text, window.start, window.end):
                    if match.start() >= window.own_start:
                        found = match.group(0) if match.start() < window.own_end else None
                        break
                if found is not None:
                    break
            if found is None and self.match_all:
                return _keyword_result(self.name, None)
            firsts.append(found)
        return _keyword_result(self.name, firsts[0])


@functools.lru_cache(maxsize=1024)  # bounded: a user regex can match any text
def _keyword_result(name: str, label: str | None) -> SignalResult:
    """A keyword signal's result: matched exactly when a match (``label``, possibly empty)
    was found. Results are immutable, so one per (signal, label) serves every request."""
    matched = label is not None
    return SignalResult(name, matched, 1.0 if matched else 0.0, label)


@dataclass(frozen=True, slots=True)
class ContextLengthSpec:
    name: str
    on_error: str
    min_tokens: int | None
    max_tokens: int | None

    def evaluate(self, tokens: int) -> SignalResult:
        matched = (self.min_tokens is None or tokens >= self.min_tokens) and (
            self.max_tokens is None or tokens <= self.max_tokens
        )
        return SignalResult(self.name, matched, float(tokens))


@dataclass(frozen=True, slots=True)
class LearnedSpec:
    name: str
    on_error: str
    kind: str
    model: str | None
    threshold: float
    device: str | None
    examples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    text_source: str | None = None
    fallback: re.Pattern[str] | None = None
    """``fallback_keywords`` as one pattern: what the signal matches on when its classifier
    fails or times out."""
    escalate_at: float | None = None




# Scripts written without spaces between words (CJK ideographs, kana, Hangul, Thai, Lao,
# Khmer, Myanmar): a keyword's edge next to one of these is still a word edge, as in
# "Pythonでリスト" or "我的Java程序" (``\b`` would see one long word there).
_UNSPACED = ("\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3100-\u312f"
             "\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
             "\uff66-\uff9f")
_SPACED_WORD = f"[^\\W{_UNSPACED}]"  # a word character of a script that spaces its words
_START = f"(?<!{_SPACED_WORD})"
_END = f"(?!{_SPACED_WORD})"
_SPACED_FIRST = re.compile(_SPACED_WORD)
_SPACED_LETTER_LAST = re.compile(f"[^\\W\\d_{_UNSPACED}]$")
_SPACED_LAST = re.compile(f"{_SPACED_WORD}$")


def keyword_pattern(keyword: str, *, regex: bool, word_boundary: bool) -> str:
    """The regex source for one keyword; word boundaries only where the keyword has word
    characters of a spaced script at that edge (so ``c++`` still matches, and a keyword in
    Chinese or Japanese matches inside a sentence). With word boundaries, a keyword that ends
    in a letter also matches its plural (``unit test`` finds "unit tests", ``regex``
    "regexes"), as people write either."""
    if regex:
        return keyword
    start, end = _edges(keyword, word_boundary)
    return start + re.escape(keyword) + end


def _edges(keyword: str, word_boundary: bool) -> tuple[str, str]:
    """What a literal keyword's pattern puts before and after it (see keyword_pattern)."""
    if not word_boundary:
        return "", ""
    start = _START if _SPACED_FIRST.match(keyword) else ""
    if _SPACED_LETTER_LAST.search(keyword):
        return start, "(?:e?s)?" + _END
    return start, _END if _SPACED_LAST.search(keyword) else ""


def fold_case(text: str) -> str:
    """What a folded keyword signal reads: full case folding (the long s, the Kelvin sign and
    ligatures read as s, k, fi), with the dotted capital I read as i, as IGNORECASE reads it
    (``str.casefold`` gives i and a combining dot)."""
    return text.casefold().replace("i\u0307", "i")


def casefold_safe(keywords: list[str], *, regex: bool) -> bool:
    """Whether a case-insensitive list can be matched case-sensitively, from casefolded
    keywords, against the casefolded text: several times faster, as Python's regex engine
    searches for a pattern's literal start only without IGNORECASE. Literal keywords qualify
    unless casefolding changes more than case (a ß, a ligature); regexes only when written
    without capitals (which also keeps out ``\\S``, ``\\W``, ``\\B``, ``[A-Z]``). Casefolding
    also reads the long s and the Kelvin sign as s and k, as IGNORECASE does."""
    if regex:
        return all(k == k.casefold() for k in keywords)
    return all(k.lower() == k.lower().casefold() for k in keywords)


def keyword_gate(keywords: list[str], *, regex: bool, case_sensitive: bool, match_all: bool,
                 fold: bool = False) -> LiteralGate | None:
    """The literal gate (``literals.literal_gate``) of an ``any`` list of regexes, compiled
    as ``compile_keywords`` compiles the list; None for literal lists (already one trie)."""
    if not regex or match_all:
        return None
    return literal_gate(keywords, 0 if case_sensitive or fold else re.IGNORECASE)


def compile_keywords(
    keywords: list[str], *, regex: bool, case_sensitive: bool, word_boundary: bool, match_all: bool,
    fold: bool = False,
) -> tuple[re.Pattern[str], ...]:
    """Raises ``re.error`` for an invalid user regex; the loader reports it by YAML path.

    ``any`` over literal keywords is one alternation of tries, one per shape of edges
    (whole words ending in a letter, most lists; phrases in unspaced scripts, which need no
    boundaries; ...): the regex engine then follows one branch per character instead of
    trying every keyword at every position (2-4x faster on chat prompts with English lists,
    10x with phrases in many scripts). It matches exactly the texts the keywords' own patterns
    match; where several keywords match at one place, the longest is the label."""
    flags = 0 if case_sensitive or fold else re.IGNORECASE
    if fold and not regex:
        keywords = [k.lower() for k in keywords]
    if match_all:
        return tuple(re.compile(keyword_pattern(k, regex=regex, word_boundary=word_boundary),
                                flags) for k in keywords)
    if regex:
        return (re.compile("|".join(f"(?:{k})" for k in keywords), flags),)
    shapes: dict[tuple[str, str], list[str]] = {}
    for keyword in keywords:
        shapes.setdefault(_edges(keyword, word_boundary), []).append(
            keyword if case_sensitive else keyword.lower())
    sources = [start + trie_source(words) + end for (start, end), words in shapes.items()]
    return (re.compile("|".join(f"(?:{s})" for s in sources), flags),)


def estimate_tokens(text_length: int) -> int:
    """A cheap token estimate (about 4 characters a token for English and code).

    The context-length signal only needs the right order of magnitude, and counting with the
    backend's own tokenizer would put a tokenizer load per model on the hot path."""
    return (text_length + 3) // 4


@dataclass(frozen=True, slots=True)
class PiiSpec:
    """Structured PII; the detector itself is built at start-up by the evaluator (its
    recognizers compile their patterns once), never by config loading."""

    name: str
    on_error: str
    entity_types: tuple[str, ...] | None
    threshold: float
    text_source: str | None = None


@dataclass(frozen=True, slots=True)
class LanguageSpec:
    """The detector is built at start-up by the evaluator (its model loads in ~1 s)."""

    name: str
    on_error: str
    languages: tuple[str, ...] | None
    threshold: float
    text_source: str | None = None


SignalSpec = KeywordSpec | ContextLengthSpec | LearnedSpec | PiiSpec | LanguageSpec
