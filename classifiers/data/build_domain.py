"""Build domain-classifier JSONL from the MMLU-Pro questions (14 categories).

Usage: python -m classifiers.data.build_domain [--source questions.jsonl] [--out DIR]
Writes `train.jsonl` (the `train` split), `test.jsonl` (the `test` split, question text only) and
`test_options.jsonl` (the `test` split as the question is posed to a model: stem and lettered
answer choices), the last two for the reported accuracy only. Each train question appears as its
plain text and, unless `--no-options`, also with its answer choices (the choices name the
subject's vocabulary: units, compounds, statutes); a seeded `--augment` fraction (default 0.3)
also as one chat-style rewording (group = question id, so early stopping never splits a
question's variants): routed traffic arrives as a user message ("Can you explain ...?"), not as
a bare exam item. After the MMLU-Pro rows, train.jsonl gets the hand-written conversational
prompts of `classifiers.data.chat_domains` (395 prompts, 28-30 per label), each repeated
`--chat-repeat` times (default 3; one group per prompt, so its copies stay on one side of the
early-stopping split), and the hand-written short chat turns of `classifiers.data.small_talk`
("hello", "continue") labelled `other`, `--short-repeat` times (default 3).
`--chat-repeat 0 --short-repeat 0 --no-options` rebuilds the MMLU-Pro-only data.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator, Sequence
from itertools import chain
from pathlib import Path

from classifiers.data.chat_domains import chat_rows
from classifiers.data.small_talk import short_messages
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


def with_options(question: str, options: Sequence[str]) -> str:
    """The question as it is posed to a model: stem, then lettered answer choices."""
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return "\n".join([question, *(f"{letters[i]}. {o}" for i, o in enumerate(options))])


def rows(
    source: Path, split: str, augment: float, seed: int = 0, *, stem: bool = True,
    options: bool = False,
) -> Iterator[dict[str, str]]:
    """Labelled rows for one split: the bare `stem` and/or the question `with_options`; a
    seeded `augment` fraction also gets one chat rewording of the stem."""
    rng = random.Random(seed)
    with source.open(encoding="utf-8") as handle:
        for line in handle:
            item = json.loads(line)
            if item["split"] != split:
                continue
            question, label, group = item["question"].strip(), item["category"], str(item["id"])
            if stem:
                yield {"text": question, "label": label, "group": group}
            if options:
                text = with_options(question, item.get("options") or ())
                yield {"text": text, "label": label, "group": group}
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
    parser.add_argument(
        "--no-options", dest="options", action="store_false",
        help="leave out the questions with their answer choices (train rows)",
    )
    parser.add_argument(
        "--short-repeat", type=int, default=3,
        help="copies of each hand-written short chat turn, labelled `other` (0: none)",
    )
    args = parser.parse_args(argv)
    train = chain(
        rows(args.source, "train", args.augment, options=args.options),
        chat_rows(args.chat_repeat),
        short_turn_rows(args.short_repeat),
    )
    n_train = write_jsonl(args.out / "train.jsonl", train)
    n_test = write_jsonl(args.out / "test.jsonl", rows(args.source, "test", augment=0.0))
    write_jsonl(args.out / "test_options.jsonl",
                rows(args.source, "test", 0.0, stem=False, options=True))
    print(f"wrote {n_train} train rows and {n_test} test rows (+ test_options) to {args.out}")
    return 0


def short_turn_rows(repeat: int) -> list[dict[str, str]]:
    """Greetings, thanks and follow-ups ("continue") carry no subject: `other`, the label the
    default route takes, instead of whichever subject their few tokens happen to resemble."""
    return [
        {"text": text, "label": "other", "group": f"short:{i}", "source": "short"}
        for i, text in enumerate(short_messages(held_out=False))
        for _ in range(repeat)
    ]


if __name__ == "__main__":
    raise SystemExit(main())
