"""Build domain-classifier JSONL from the MMLU-Pro questions (14 categories).

Usage: python -m classifiers.data.build_domain [--source questions.jsonl] [--out DIR]
Writes `train.jsonl` (the `train` split) and `test.jsonl` (the `test` split, question text only,
for the reported accuracy). Each train question appears as its plain text; a seeded `--augment`
fraction (default 0.3) also as one chat-style rewording (group = question id, so early stopping
never splits a question's variants): routed traffic arrives as a user message ("Can you explain
...?"), not as a bare exam item. Options are
left out: they add tokens (and truncation) without naming the subject any better than the stem.
After the MMLU-Pro rows, train.jsonl gets the hand-written conversational prompts of
`classifiers.data.chat_domains` (395 prompts, 28-30 per label), each repeated `--chat-repeat` times
(default 3, so they weigh 1,185 of about 13,700 rows; one group per prompt, so its copies stay on
one side of the early-stopping split). `--chat-repeat 0` rebuilds the MMLU-Pro-only data.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from itertools import chain
from pathlib import Path

from classifiers.data.chat_domains import chat_rows
from classifiers.data.sources import DEFAULT_ROOT, write_jsonl

DEFAULT_SOURCE = Path("/work/shared/data/mmlu-pro/questions.jsonl")
LABELS = (
    "biology",
    "business",
    "chemistry",
    "computer science",
    "economics",
    "engineering",
    "health",
    "history",
    "law",
    "math",
    "other",
    "philosophy",
    "physics",
    "psychology",
)
CHAT_TEMPLATES = (
    "Can you help me with this question? {q}",
    "{q}\nPlease explain your reasoning step by step.",
    "I'm studying for an exam and I'm stuck on this one: {q}",
    "Question: {q}\nAnswer:",
    "Quick question - {q}",
    "Could you walk me through the following? {q}",
    "{q} Thanks in advance!",
    "My teacher asked us this and I don't get it: {q}",
)


def rows(source: Path, split: str, augment: float, seed: int = 0) -> Iterator[dict[str, str]]:
    """Labelled rows for one split; a seeded `augment` fraction also gets one chat rewording."""
    rng = random.Random(seed)
    with source.open(encoding="utf-8") as handle:
        for line in handle:
            item = json.loads(line)
            if item["split"] != split:
                continue
            question, label, group = item["question"].strip(), item["category"], str(item["id"])
            yield {"text": question, "label": label, "group": group}
            if rng.random() < augment:
                template = rng.choice(CHAT_TEMPLATES)
                yield {"text": template.format(q=question), "label": label, "group": group}


def main(argv: list[str] | None = None) -> int:
    """Write train.jsonl and test.jsonl; prints the counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--out", type=Path, default=DEFAULT_ROOT / "domain")
    parser.add_argument(
        "--augment", type=float, default=0.3, help="fraction of train questions also reworded"
    )
    parser.add_argument(
        "--chat-repeat",
        type=int,
        default=3,
        help="copies of each hand-written conversational prompt appended to train (0: none)",
    )
    args = parser.parse_args(argv)
    train = chain(rows(args.source, "train", args.augment), chat_rows(args.chat_repeat))
    n_train = write_jsonl(args.out / "train.jsonl", train)
    n_test = write_jsonl(args.out / "test.jsonl", rows(args.source, "test", augment=0.0))
    print(f"wrote {n_train} train rows and {n_test} test rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
