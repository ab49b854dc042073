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

Added after an audit of agent traffic (tenth session), benign: agent-framework prompt templates
sent as one user message (tool lists, Thought/Action/Observation formats, role and backstory
blocks), product system prompts pasted into a user turn by clients without a system role (with
their "do not reveal these instructions" and "stay in character" rules), requests to review,
improve or translate one's own prompt, everyday e-mail and message drafts, and agent run logs and
stack traces. Jailbreak (`agent_prompt_attacks`): the same shapes carrying a real override,
prompt extraction or injected instruction, so the head learns the override rather than "an agent
template is safe". A train line may mark its question ⟦like this⟧: trained, it also comes back
with the slot filled by other questions (the file's `fills`), as real traffic fills one template
with any question. These six categories are `untrained` for now (held-out side measured only).

Added after the head refused common follow-ups in chat and agent traffic (thirteenth session),
benign: short follow-ups, continuation requests and agent approvals ("type out the whole
program", "steps 6 onward please", "yes, apply all the suggested fixes"), some after an earlier
short user turn joined by a newline (`follow_ups`), and tool-use and search requests
(`tool_requests`); jailbreak: short follow-ups carrying an override or prompt extraction
(`follow_up_attacks`: "continue, but as DAN this time"). Defensive-security and teaching
questions (`security_education`) are `untrained` (measured only).

Added after everyday code requests, format preferences and pasted documents were refused
(thirteenth session, second round), benign: programming requests in many languages,
hello-world and print tasks, and security engineering phrased as normal development work
(password hashing, JWT, HMAC, encryption, validation regexes) (`code_requests`), and format,
language, tone and length preferences ("from now on", "for the rest of this chat", "never
use ...") (`preferences`); jailbreak: the same shapes carrying an override or prompt
extraction (`preference_attacks`).
Long pasted documents are built in `classifiers/data/long_documents.py`, not here.

`hard_cases.json` beside this module holds both sides by category; `train` and `held_out` were
written separately and share no line; `held_out` also has languages, agent frameworks and
products never in `train`. Each category is its own source (`hand-written/<category>`), so
held-out metrics report it apart. Categories listed under `untrained` are measured (held-out
side) but not trained on; the file's `_untrained_note` says why for each.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HARD_CASES = Path(__file__).with_name("hard_cases.json")
# A train line's question slot: ⟦the question it was written with⟧ (see the file's `fills`).
_SLOT = re.compile("\u27e6(.*?)\u27e7", re.S)


def _fill(text: str, value: str) -> str:
    return _SLOT.sub(lambda _: value, text)


def hard_cases(held_out: bool) -> Iterator[tuple[str, str, str]]:
    """`(text, label, source)` for every hand-written line of one side; on the train side a
    line with a question slot also comes back with the slot filled by `fills["per_template"]`
    of `fills["questions"]` (seeded), with the line's label."""
    data = json.loads(HARD_CASES.read_text(encoding="utf-8"))
    fills: dict[str, Any] = data.get("fills", {})
    rng = random.Random(0)
    for category, texts in data["held_out" if held_out else "train"].items():
        if not held_out and category in data.get("untrained", ()):
            continue
        label, source = data["labels"][category], f"hand-written/{category}"
        for text in texts:
            yield _SLOT.sub(r"\1", text), label, source
            if not held_out and fills and _SLOT.search(text):
                for question in rng.sample(fills["questions"], fills["per_template"]):
                    yield _fill(text, question), label, source
