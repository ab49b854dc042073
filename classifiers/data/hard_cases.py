"""Hand-written hard cases for the jailbreak head, added after an audit with fresh prompts found
everyday phrasing blocked and some attack styles missed.

Benign (the head blocked them): people retracting or correcting their own earlier messages or
instructions ("ignore my last message", "scratch that"), questions about LLM security asked to
defend or learn (what prompt injection is, how system prompts work, how to red-team one's own
bot), and harmless look-alikes (corrections in other languages, role-play as a late relative with
nothing secret to tell, leetspeak as a topic). Jailbreak (the head missed them): instruction
overrides in other languages, obfuscated overrides (leetspeak, spacing, encodings) and
sentimental role-play extraction (a late relative who "used to read" keys, passwords or recipes
for dangerous things).

`hard_cases.json` beside this module holds both sides by category; `train` and `held_out` were
written separately and share no line, and `held_out` also has languages never in `train`. Each
category is its own source (`hand-written/<category>`), so held-out metrics report it apart.
Categories listed under `untrained` are measured (held-out side) but not trained on: with them
the head lost recall on held-out attack templates (see the file's `_untrained_note`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

HARD_CASES = Path(__file__).with_name("hard_cases.json")


def hard_cases(held_out: bool) -> Iterator[tuple[str, str, str]]:
    """`(text, label, source)` for every hand-written line of one side."""
    data = json.loads(HARD_CASES.read_text(encoding="utf-8"))
    for category, texts in data["held_out" if held_out else "train"].items():
        if not held_out and category in data.get("untrained", ()):
            continue
        for text in texts:
            yield text, data["labels"][category], f"hand-written/{category}"
