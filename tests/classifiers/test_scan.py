"""Chunked scans of long texts (classifiers/scan.py): the same findings as one pass, values
cut by a chunk boundary included, and a budget that stops the scan between chunks."""

from __future__ import annotations

import itertools
import random

import pytest

from classifiers.api import ClassifierTimeout
from classifiers.language import LanguageDetector
from classifiers.pii import PiiDetector, PiiFinding, _resolve_overlaps
from classifiers.scan import OVERLAP_CHARS, ScanBudget, ScanCancelled, windows

SMALL = 1000  # chunk size for the tests: many cuts in a few kB
ONE_PASS = 10**9
VALUES = (  # (value, words before it that give context)
    ("4111 1111 1111 1111", "my card number is "),
    ("5555-5555-5555-4444", ""),
    ("536-22-1234", "SSN: "),
    ("123-45-6789", "my SSN is "),  # a placeholder that counts only after its context
    ("DE89 3704 0044 0532 0130 00", "iban "),
    ("GB82WEST12345698765432", ""),
    ("ghp_" + "a1B2c3D4e5" * 4, "token "),
    ("Bearer abc123DEF456ghi789JKL0", "Authorization: "),
    ("sk-proj-" + "x9Y8z7W6v5" * 30, "api key "),  # longer than the overlap
    ("jane.roe@example.com", "mail "),
    ("(415) 555-2671", "call me at "),
    ("198.51.100.7", "from "),
)
FILLER = ("the", "router", "reads", "every", "turn", "of", "a", "long", "conversation", "and",
          "42", "2023-11-30", "x", "numbers", "like", "7", "are", "not", "pii", "phone")


def _filler(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(FILLER))
    return " ".join(words)


@pytest.fixture(scope="module")
def detectors() -> tuple[PiiDetector, PiiDetector]:
    """(chunked every SMALL characters, one pass), all entity types."""
    return PiiDetector(chunk_chars=SMALL), PiiDetector(chunk_chars=ONE_PASS)


def _spans(findings: tuple[PiiFinding, ...], text: str) -> list[tuple[str, str, float]]:
    return [(f.entity_type, text[f.start : f.end], f.score) for f in findings]


def test_windows_partition_the_text_at_whitespace() -> None:
    text = _filler(random.Random(1), 10_000)
    parts = windows(text, SMALL)
    assert parts[0].own_start == 0 and parts[-1].own_end == len(text)
    for a, b in itertools.pairwise(parts):
        assert a.own_end == b.own_start
        assert text[a.own_end - 1] == " "  # cut right after a space
    for part in parts:
        assert part.own_end - part.own_start <= SMALL
        assert part.start <= max(0, part.own_start - OVERLAP_CHARS)
        assert part.end >= min(len(text), part.own_end + OVERLAP_CHARS)
    assert windows("short", SMALL) == windows("short")[:1]
    solid = "a" * 5000  # no whitespace at all: hard cuts, still a partition
    assert [(p.own_start, p.own_end) for p in windows(solid, SMALL)] == [
        (i, i + SMALL) for i in range(0, 5000, SMALL)]


@pytest.mark.parametrize(("value", "context"), VALUES)
def test_values_across_a_chunk_boundary_are_found_as_in_one_pass(
    detectors: tuple[PiiDetector, PiiDetector], value: str, context: str
) -> None:
    chunked, one_pass = detectors
    rng = random.Random(7)
    head = _filler(rng, SMALL + 200)
    tail = _filler(rng, 300)
    first_cut = windows(head + " " + tail, SMALL)[0].own_end
    item = context + value
    cut_through = 0
    # the value and its context words start at every offset around the first cut (a sample
    # of them for long values)
    shifts = list(range(-len(item) - 2, 3))
    for shift in shifts if len(shifts) <= 40 else sorted(rng.sample(shifts, 40)):
        position = max(0, first_cut + shift)
        text = head[:position] + " " + item + " " + head[position:] + " " + tail
        cut = windows(text, SMALL)[0].own_end
        start = text.index(item)
        cut_through += start <= cut <= start + len(item)
        expected = one_pass.detect(text)
        assert _spans(chunked.detect(text), text) == _spans(expected, text), (shift, cut)
        assert any(text[f.start : f.end].strip() in value for f in expected), value
    assert cut_through > 0  # some placements really met a cut


@pytest.mark.parametrize("seed", range(6))
def test_random_texts_give_the_same_findings_chunked(
    detectors: tuple[PiiDetector, PiiDetector], seed: int
) -> None:
    chunked, one_pass = detectors
    rng = random.Random(seed)
    parts = []
    for _ in range(60):
        value, context = rng.choice(VALUES)
        parts.append(_filler(rng, rng.randint(0, 400)))
        parts.append(context + value if rng.random() < 0.7 else value)
    text = rng.choice((" ", "\n", ", ")).join(parts)
    expected = one_pass.detect(text)
    assert len(expected) >= 40
    assert chunked.detect(text) == expected


def test_default_chunks_on_a_long_prompt() -> None:
    detector = PiiDetector(["CREDIT_CARD", "US_SSN", "IBAN_CODE", "API_KEY"])
    one_pass = PiiDetector(detector.entity_types, chunk_chars=ONE_PASS)
    rng = random.Random(3)
    text = " ".join(_filler(rng, 2000) + " " + " ".join(rng.choice(VALUES)) for _ in range(60))
    assert len(windows(text)) > 2
    assert detector.detect(text, ScanBudget(60)) == one_pass.detect(text)


def _resolve_one_by_one(candidates: list[PiiFinding]) -> tuple[PiiFinding, ...]:
    """The former quadratic resolution, as the reference."""
    kept: list[PiiFinding] = []
    for finding in sorted(candidates, key=lambda f: (-f.score, f.start - f.end, f.start)):
        if all(finding.end <= k.start or finding.start >= k.end for k in kept):
            kept.append(finding)
    return tuple(sorted(kept, key=lambda f: f.start))


def test_overlap_resolution_matches_the_pairwise_check() -> None:
    rng = random.Random(5)
    for _ in range(200):
        candidates = []
        for _ in range(rng.randint(0, 40)):
            start = rng.randint(0, 300)
            candidates.append(PiiFinding(rng.choice("AB"), start, start + rng.randint(1, 40),
                                         rng.choice((0.4, 0.6, 0.85, 1.0))))
        assert _resolve_overlaps(candidates) == _resolve_one_by_one(candidates)


def test_many_values_resolve_quickly() -> None:
    """36 000 IBANs in a MB took 55 s to resolve pairwise; bisection keeps it near-linear."""
    findings = [PiiFinding("IBAN_CODE", i * 28, i * 28 + 27, 1.0) for i in range(40_000)]
    findings += [PiiFinding("CREDIT_CARD", i * 28, i * 28 + 19, 0.5) for i in range(40_000)]
    assert len(_resolve_overlaps(findings)) == 40_000


def test_budget_stops_a_scan_between_chunks() -> None:
    detector = PiiDetector(["CREDIT_CARD"], chunk_chars=SMALL)
    text = "1234 5678 " * 2000  # 20 chunks
    spent = ScanBudget(0.0)
    with pytest.raises(ClassifierTimeout):
        detector.detect(text, spent)
    assert spent.chunks == 0
    cancelled = ScanBudget(60)
    cancelled.cancel()
    with pytest.raises(ScanCancelled):
        detector.detect(text, cancelled)
    budget = ScanBudget(60)
    assert detector.detect(text, budget) == ()
    assert budget.chunks == len(windows(text, SMALL)) == 20


def test_language_walk_with_a_budget_matches_the_library() -> None:
    detector = LanguageDetector()
    rng = random.Random(2)
    words = ("der", "schnelle", "braune", "Fuchs", "springt", "über", "the", "lazy", "dog",
             "東京は", "今", "何時")
    for size in (300, 40_000, 150_000):
        text = " ".join(rng.choice(words) for _ in range(size // 5))
        assert detector.detect(text, ScanBudget(60)) == detector.detect(text)
    long = "Wie spät ist es in Berlin? " * 5000
    with pytest.raises(ClassifierTimeout):
        detector.detect(long, ScanBudget(0.0))
    cancelled = ScanBudget(60)
    cancelled.cancel()
    with pytest.raises(ScanCancelled):
        detector.detect(long, cancelled)
    assert detector.detect("Wie spät ist es in Berlin?", ScanBudget(0.0)).language == "de"
