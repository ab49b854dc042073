"""Numbers split so that no pattern over the text as written sees them whole (over a line
break, two content parts or messages, one digit at a time) are read rejoined where a card, SSN,
IBAN or account word comes just before them; lower-case IBANs are read as IBANs."""

from __future__ import annotations

import pytest

from classifiers.pii import PiiDetector
from classifiers.pii_split import rejoined

DETECTOR = PiiDetector()


def found(text: str) -> list[tuple[str, str]]:
    return [(f.entity_type, text[f.start : f.end]) for f in DETECTOR.detect(text)]


@pytest.mark.parametrize(("text", "entity", "value"), [
    ("my ssn is 078-05-\n1120 thanks", "US_SSN", "078-05-\n1120"),
    ("card: 41111111\n11111111", "CREDIT_CARD", "41111111\n11111111"),
    ("card number 4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 ok", "CREDIT_CARD",
     "4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1"),
    ("wire it to my iban nl91abna0417164300 please", "IBAN_CODE", "nl91abna0417164300"),
])
def test_split_and_lower_case_values_are_found(text: str, entity: str, value: str) -> None:
    assert found(text) == [(entity, value)]


@pytest.mark.parametrize("text", [
    "sales by month\n41111111\n11111111",       # a column of numbers, Luhn-valid joined
    "order 078-05-\n1120",                       # no SSN word
    "1 2 3 4 5 6 7 8 9 1 2 3 4 5 6",             # a list of digits
    "card 4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1",  # longer than any card
])
def test_unnamed_or_overlong_pieces_stay_apart(text: str) -> None:
    assert found(text) == []


def test_rejoined_offsets_point_at_the_original_characters() -> None:
    text = "ssn 078-05-\n  1120 and card 4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1"
    joined, origin = rejoined(text, text.lower()) or ("", [])
    assert "078-05-1120" in joined and "4111111111111111" in joined
    assert len(origin) == len(joined) + 1 and origin[-1] == len(text)
    assert all(text[origin[i]] == char for i, char in enumerate(joined))
    assert rejoined("no numbers here", "no numbers here") is None
