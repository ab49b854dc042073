"""Short chat turns as benign data for the jailbreak head: greetings, acknowledgements,
follow-ups ("continue", "make it shorter"), questions to the assistant ("are you a bot?").

Real traffic is full of them, and a head trained only on exam questions, writing tasks and
attack templates scores a bare "hello" or "proceed" like the short imperatives of attack
templates. Two sources, each split so the held-out side is never trained on:
- `short_messages.json` beside this module: hand-written lines, `train` and `held_out` written
  separately (no shared line);
- chatterbot-corpus (BSD licence), multilingual small-talk YAML: whole files are held out
  (three English topics and eleven languages), the rest is training data.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import yaml

from classifiers.data.sources import hand_written_side

SHORT_MESSAGES = Path(__file__).with_name("short_messages.json")
HELD_OUT_ENGLISH = frozenset({"conversations", "emotion", "humor"})
HELD_OUT_LANGUAGES = frozenset({
    "dutch", "swedish", "turkish", "indonesian", "korean", "ukrainian", "traditionalchinese",
    "tamil", "urdu", "marathi", "yoruba",
})
PER_FILE = 15  # tech_support alone has 2,100 lines; keep every topic and language in view


def short_messages(held_out: bool) -> tuple[str, ...]:
    """The hand-written lines of one side."""
    return hand_written_side(SHORT_MESSAGES, held_out)


def _is_held_out(language: str, topic: str) -> bool:
    if language == "english":
        return topic in HELD_OUT_ENGLISH
    return language in HELD_OUT_LANGUAGES


def chatterbot_lines(package: Path, held_out: bool) -> Iterator[str]:
    """Distinct utterances (both sides of each exchange) of the files on one side, at most
    `PER_FILE` per file, in a stable order."""
    root = package / "chatterbot_corpus" / "data"
    seen: set[str] = set()
    for path in sorted(root.glob("*/*.yml")):
        if _is_held_out(path.parent.name, path.stem) != held_out:
            continue
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        fresh = (text for text in _utterances(data) if text and text not in seen)
        for text in islice(fresh, PER_FILE):
            seen.add(text)
            yield text


def _utterances(data: dict[str, Any]) -> Iterator[str]:
    for exchange in data.get("conversations") or ():
        for value in exchange if isinstance(exchange, list) else ():
            yield str(value).strip()
