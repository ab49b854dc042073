"""Where PII detection departs from Presidio on purpose (classifiers.pii_policy): hostile
spellings of real values are found, shapes from code, logs and docs are not someone's numbers."""

from __future__ import annotations

import pytest

from classifiers.pii import PiiDetector

DETECTOR = PiiDetector(["CREDIT_CARD", "US_SSN", "IBAN_CODE", "API_KEY"])


def with_check_digit(stem: str) -> str:
    """`stem` plus the digit that makes it pass the Luhn check."""
    for last in "0123456789":
        digits = [int(c) for c in stem + last][::-1]
        total = sum(d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2)
                    for i, d in enumerate(digits))
        if total % 10 == 0:
            return stem + last
    raise AssertionError(stem)


def found(text: str) -> list[tuple[str, str]]:
    return [(f.entity_type, text[f.start:f.end]) for f in DETECTOR.detect(text)]


@pytest.mark.parametrize("text", [
    "my card is ４１１１ １１１１ １１１１ １１１１",                 # full-width digits
    "card: ٤١١١ ١١١١ ١١١١ ١١١١",                                # Arabic-Indic digits
    "pay with 4111\u00a01111\u00a01111\u00a01111",               # no-break spaces
    "pay with 4111\u20091111\u20091111\u20091111",               # thin spaces
    "pay with 4111\u20131111\u20131111\u20131111",               # en dashes
    "pay with 4111.1111.1111.1111",
    "pay with 4111/1111/1111/1111",
    "pay with 4111_1111_1111_1111",
    "pay with 4111  1111  1111  1111",
    "pay with 4111 - 1111 - 1111 - 1111",
    "amex 3782.822463.10005",
    "charge 4111111111111111 now",                               # one bare run still counts
    "pay with 4111\t1111\t1111\t1111",
    "my card:\n4111\n1111\n1111\n1111\nthanks",                  # one group per line
    "card4111111111111111 please",                               # glued to a word
    "card#4111111111111111exp 12/29",
    "my card is 4111 1111\n1111 1111 thanks",                    # broken over two lines
    "card: 4111-1111-\n   1111-1111",
])
def test_cards_in_other_spellings_are_found(text: str) -> None:
    assert [entity for entity, _ in found(text)] == ["CREDIT_CARD"], found(text)


def test_other_spellings_keep_their_offsets() -> None:
    text = "x ４１１１ １１１１ １１１１ １１１１ y"
    ((entity, value),) = found(text)
    assert entity == "CREDIT_CARD"
    assert value == "４１１１ １１１１ １１１１ １１１１"


def test_ssn_spelled_with_other_dashes_is_found() -> None:
    assert found("my SSN is 536\u201322\u20138143") == [("US_SSN", "536\u201322\u20138143")]


def test_microsecond_timestamps_are_not_cards() -> None:
    stamp = with_check_digit("173291234512345")  # 16 digits starting with 1, Luhn-valid
    assert found(f'{{"ts": {stamp}, "level": "info", "msg": "request done"}}') == []


def test_an_identifier_column_is_not_cards() -> None:
    ids = [with_check_digit(f"45320151128{n:04d}") for n in range(6)]
    log = "\n".join(f"order_id={i} status=synced" for i in ids)
    assert found(log) == []
    assert found(f"my card number is {ids[0]}") == [("CREDIT_CARD", ids[0])]


def test_numbers_broken_over_lines_need_a_card_word() -> None:
    table = "sales by quarter\n4111 1111\n1111 1111\n"  # a table of numbers, Luhn-valid
    assert found(table) == []
    assert found("card " + table.split("\n", 1)[1]) == [("CREDIT_CARD", "4111 1111\n1111 1111")]


def test_ssn_shapes_with_spaces_or_dots_need_an_ssn_word() -> None:
    table = "shape (512 48 2210) and (901.77.3310)"
    assert found(table) == []
    assert found("social security number 512 48 2210") == [("US_SSN", "512 48 2210")]
    assert found("id 512-48-2210") == [("US_SSN", "512-48-2210")]  # the dashed form as before


@pytest.mark.parametrize(("text", "ssn"), [
    ("format this row: John Park, SSN 071114336, start date 2025-01-06", "071114336"),
    ("social security no. 512482210 for the form", "512482210"),
    ("Patient SSN: 512482210", "512482210"),
    ("ssn#512482210", "512482210"),
])
def test_a_bare_nine_digit_run_labelled_ssn_is_found(text: str, ssn: str) -> None:
    assert found(text) == [("US_SSN", ssn)]


@pytest.mark.parametrize("text", [
    "order 512482210 shipped; the SSN field stays empty",   # the word, but not its label
    "SSN 000482210 is not a number the SSA issues",
    "routing number 512482210",
    "SSN 5124822101 has ten digits",
])
def test_other_nine_digit_runs_are_not_ssns(text: str) -> None:
    assert [t for t, _ in found(text)] == []


@pytest.mark.parametrize(("text", "ssns"), [
    ("Is ISBN 978-960-16-4567-4 valid? How is its check digit computed?", 0),  # inside an ISBN
    ("part 12-536-22-1847 is out of stock", 0),
    ("firmware 2.536-22-1847.4 crashed", 0),
    ("she wrote 536-22-1847 on the form", 1),                # on its own: an SSN's shape
    ("call 536-22-1847 about it", 0),                        # labelled a phone number
    ("our tensor has shape 128-64-3200", 0),                 # a shape
    ("call me back, my SSN is 536-22-1847", 1),              # with its word, kept
    ("My SSN is 536-22-1847-0, the last digit a typo", 1),   # with its word, kept
])
def test_an_ssn_shape_inside_a_longer_identifier_is_not_an_ssn(text: str, ssns: int) -> None:
    assert [t for t, _ in found(text)] == ["US_SSN"] * ssns, found(text)


@pytest.mark.parametrize("key", [
    "sk_test_xxxxxxxxxxxxxxxxxxxxxxxx",
    "ghp_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
    "hf_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "sk-" + "x" * 48,
    "AKIAIOSFODNN7EXAMPLE",
    "sk-proj-REPLACE_ME_WITH_YOUR_OWN_KEY_123",
    "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwia"
    "WF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
])
def test_placeholder_and_published_sample_keys_are_not_credentials(key: str) -> None:
    assert found(f"OPENAI_API_KEY={key}") == []


@pytest.mark.parametrize("key", [
    "sk-proj-a8B3kd93JdkL02mdLq94nZx7Vb2Kq9sLp0Wm",
    "ghp_a8B3kd93JdkL02mdLq94nZx7Vb2Kq9sLp0Wm",
    "AKIA2E0A8F3B244C9986",
])
def test_real_looking_keys_are_still_found(key: str) -> None:
    assert found(f"my key is {key}") == [("API_KEY", key)]


def test_published_test_cards_and_ibans_are_still_found() -> None:
    assert found("card 4242 4242 4242 4242") == [("CREDIT_CARD", "4242 4242 4242 4242")]
    assert found("IBAN DE89 3704 0044 0532 0130 00") == [
        ("IBAN_CODE", "DE89 3704 0044 0532 0130 00")]


@pytest.mark.parametrize("text", [
    "IMEI 353918053395634 reported stolen",               # 15 digits, 35: an IMEI, Luhn-valid
    "SIRET 35600000000048",                               # 14 digits, 35: not Diners
    "e-ticket 6186654793745",                             # 13 digits, 6: no network
    "order GPA.3312-1715-2913-86371",                     # 17 digits, 33
    "buses at 2005 2035 2105 2135 tonight",               # 2005...: below Mastercard's 2221
    "2^45 = 35184372088832",
    "see https://example.com/sk-learn-pipelines-for-beginners-2024",
])
def test_identifiers_no_card_network_issues_and_slugs_are_not_refused(text: str) -> None:
    assert found(text) == []


@pytest.mark.parametrize("stem", ["422222222222", "37828224631000", "3056930902590",
                                  "601111111111111", "350411333300000", "555555555555444",
                                  "222300312200322", "675964982643845", "411111111111111111"])
def test_every_network_length_is_still_a_card(stem: str) -> None:
    card = with_check_digit(stem)
    assert found(f"card {card}") == [("CREDIT_CARD", card)]


@pytest.mark.parametrize("text", [
    "Drain pump, part no. 620-77-4412",
    "EAN 4006381000994, 24 pieces",
    "order #4532015112830366 shipped",
    "tracking: 4111 1111 1111 1111",
])
def test_numbers_labelled_as_other_identifiers_are_not_refused(text: str) -> None:
    assert found(text) == []


def test_a_card_or_ssn_word_outweighs_an_identifier_label() -> None:
    assert found("order paid with card 4111 1111 1111 1111") == [
        ("CREDIT_CARD", "4111 1111 1111 1111")]
    assert found("customer SSN 536-22-8143") == [("US_SSN", "536-22-8143")]
