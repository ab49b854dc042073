"""Hand-written conversational prompts for the domain head (14 MMLU-Pro categories).

MMLU-Pro is exam text; routed traffic is a user chatting ("hey, quick one..."). These prompts were
written by hand for training only, in the way people type into a chat box: short and long, casual
and formal, typos and code. "other" follows MMLU-Pro's miscellaneous bucket and holds everyday
topics (cooking, travel, sport, hobbies, home, small talk). They are not taken from any data set
and are not the held-out `bench/data/conversational_domains.jsonl` (nothing may be trained on
that file). `build_domain` appends them to train.jsonl, repeated (see `--chat-repeat`).
The prompts live in `chat_domains.json` beside this module.
"""

from __future__ import annotations

import json
from pathlib import Path

CHAT_PROMPTS: dict[str, tuple[str, ...]] = {
    label: tuple(prompts)
    for label, prompts in json.loads(
        (Path(__file__).with_name("chat_domains.json")).read_text(encoding="utf-8")
    ).items()
}


def chat_rows(repeat: int = 3) -> list[dict[str, str]]:
    """Each prompt `repeat` times, labelled, sharing one group so early stopping keeps copies
    together."""
    out: list[dict[str, str]] = []
    for label, prompts in CHAT_PROMPTS.items():
        for i, text in enumerate(prompts):
            group = f"chat:{label}:{i}"
            out.extend(
                {"text": text, "label": label, "group": group, "source": "chat"}
                for _ in range(repeat)
            )
    return out
