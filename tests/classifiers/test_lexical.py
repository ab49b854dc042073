"""The lexical companion of a domain head: features, fitting, the on-disk format, the mix, and
the engine loading it next to a head."""

from __future__ import annotations

import asyncio
import json
import random
import re
import string
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from classifiers import ClassifierError, ClassifierSettings, LearnedSignalSpec
from classifiers.engine import SignalEngine
from classifiers.heads import Head, HeadSpec, save_head
from classifiers.lexical import (
    CONFIG_FILE,
    MAX_CHARS,
    WEIGHTS_FILE,
    LexicalFormatError,
    LexicalModel,
    load_lexical,
    mix_probs,
    save_lexical,
    tokens,
    words_of,
)
from classifiers.lexical_training import (
    best_mix,
    build_vocab,
    fit_lexical,
    main,
    write_card_section,
)
from classifiers.signals import DomainSignal

LABELS = ("math", "code", "chat", "law")
TRAIN = {
    "math": ["solve the integral of x squared", "prove the theorem about prime numbers",
             "what is the derivative of sine", "compute the eigenvalues of this matrix"],
    "code": ["fix this python function", "my javascript promise never resolves",
             "refactor the python class", "compile error in my rust crate"],
    "chat": ["how was your weekend", "tell me a fun story", "good morning friend",
             "what should I cook tonight"],
    "law": ["is this contract clause enforceable", "the plaintiff filed a tort claim",
            "can my landlord break the lease contract", "appeal the court ruling on the tort"],
}
MakeHead = Callable[..., Path]


@pytest.fixture(scope="module")
def fitted() -> LexicalModel:
    texts = [t for label in LABELS for t in TRAIN[label]]
    y = np.array([LABELS.index(label) for label in LABELS for _ in TRAIN[label]])
    return fit_lexical(texts, y, LABELS, min_df=1, epochs=60, lr=5e-2)


def test_tokens_are_lower_cased_words_and_word_pairs() -> None:
    assert tokens("Fix THIS, code!") == ["fix", "this", "code", "fix this", "this code"]
    assert tokens("") == []
    assert len(tokens("a " * MAX_CHARS)) == 2 * (MAX_CHARS // 2) - 1


def test_words_are_the_regex_word_runs_for_ascii_and_unicode_text() -> None:
    """The ASCII fast path splits exactly where `\\w+` does (features must not change)."""
    rng = random.Random(7)
    alphabet = string.printable + "éÜß_€ñ日本"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        assert words_of(text) == re.findall(r"\w+", text.lower()), repr(text)
    assert words_of("Don't PANIC: x_1+y2") == ["don", "t", "panic", "x_1", "y2"]


def test_vocabulary_keeps_frequent_features_in_a_stable_order() -> None:
    docs = [["b", "a"], ["a", "c"], ["a", "b"], ["d"]]
    assert build_vocab(docs, min_df=2, max_features=10) == ["a", "b"]
    assert build_vocab(docs, min_df=1, max_features=3) == ["a", "b", "c"]


def test_fitted_model_names_the_subject_of_unseen_text(fitted: LexicalModel) -> None:
    for text, label in (("a tort claim in court", "law"), ("python function error", "code"),
                        ("the integral and the derivative", "math")):
        assert LABELS[int(fitted.log_probs(text).argmax())] == label, text


def test_text_without_known_features_gets_the_priors(fitted: LexicalModel) -> None:
    empty = fitted.log_probs("zzzz qqqq")
    assert torch.allclose(empty, torch.log_softmax(fitted.bias, dim=-1))
    assert torch.allclose(fitted.log_probs(""), empty)


def test_round_trip_keeps_predictions(fitted: LexicalModel, tmp_path: Path) -> None:
    fitted.mix = 0.35
    size = save_lexical(tmp_path, fitted, {"note": "test"})
    assert size == sum((tmp_path / n).stat().st_size for n in (WEIGHTS_FILE, CONFIG_FILE))
    loaded = load_lexical(tmp_path, LABELS)
    assert loaded is not None and loaded.mix == 0.35
    for text in ("fix the python class", "a tort claim", "hello"):  # weights stored as fp16
        assert torch.allclose(loaded.log_probs(text), fitted.log_probs(text), atol=1e-2)


def test_loading_checks_the_files(fitted: LexicalModel, tmp_path: Path) -> None:
    assert load_lexical(tmp_path, LABELS) is None
    save_lexical(tmp_path, fitted)
    with pytest.raises(LexicalFormatError, match="labels"):
        load_lexical(tmp_path, ("math", "code", "chat", "history"))
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config | {"format": "other"}))
    with pytest.raises(LexicalFormatError, match="format"):
        load_lexical(tmp_path, LABELS)
    (tmp_path / CONFIG_FILE).unlink()
    with pytest.raises(LexicalFormatError, match="both"):
        load_lexical(tmp_path, LABELS)


def test_mix_ends_are_the_two_models() -> None:
    head = torch.tensor([[0.7, 0.2, 0.1]])
    lexical = torch.log_softmax(torch.tensor([[0.0, 3.0, 0.0]]), dim=-1)
    assert torch.allclose(mix_probs(head, lexical, 0.0), head)
    assert torch.allclose(mix_probs(head, lexical, 1.0), lexical.exp())
    assert torch.allclose(mix_probs(head, lexical, 0.5).sum(), torch.tensor(1.0))


def test_best_mix_prefers_the_smaller_weight_on_ties() -> None:
    head = torch.tensor([[0.9, 0.1], [0.4, 0.6]])
    right = torch.log(torch.tensor([[0.6, 0.4], [0.95, 0.05]]))
    assert best_mix(head, right, np.array([0, 0])) == (0.2, 1.0)  # row 2 flips above 0.18
    assert best_mix(head, right, np.array([0, 1])) == (0.0, 1.0)


def test_domain_signal_mixes_the_lexical_model_over_the_text(fitted: LexicalModel) -> None:
    class Uniform(torch.nn.Module):
        labels = LABELS

        def forward(self, emb: torch.Tensor) -> torch.Tensor:
            return torch.zeros(len(emb), len(LABELS))

    fitted.mix = 0.5
    signal = DomainSignal("domain", Uniform(), 0.0, fitted)
    rows = signal.row_scores(torch.zeros(2, 4))
    score = signal.aggregate(rows, 2, False, torch.tensor([3.0, 1.0]), "the plaintiff's tort")
    assert score.label == "law"
    assert DomainSignal("domain", Uniform(), 0.0).aggregate(rows, 2, False).score == 0.25


def test_engine_loads_the_lexical_model_beside_the_head(
    fitted: LexicalModel, tmp_path: Path, head_factory: MakeHead
) -> None:
    head_dir = head_factory(tmp_path / "domain", LABELS, seed=1)
    fitted.mix = 0.9
    save_lexical(head_dir, fitted)
    spec = LearnedSignalSpec(name="domain", kind="domain", model=str(head_dir), threshold=0.0)
    engine = SignalEngine.build(ClassifierSettings(device="cpu"), [spec])

    async def classify(text: str) -> str:
        await engine.start()
        try:
            return (await engine.evaluate(text, frozenset({"domain"})))["domain"].label
        finally:
            await engine.close()

    assert asyncio.run(classify("refactor my python function")) == "code"
    (head_dir / WEIGHTS_FILE).write_bytes(b"broken")
    with pytest.raises(ClassifierError, match=r"signal 'domain'.*unreadable"):
        SignalEngine.build(ClassifierSettings(device="cpu"), [spec])


def test_card_section_is_replaced_not_repeated(fitted: LexicalModel, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# domain head\n\nbody\n")
    metrics = {"held_out_accuracy": 0.86, "eval": {"test.jsonl": {
        "n": 10, "head": 0.8, "lexical": 0.7, "mixed": 0.9}}}
    write_card_section(tmp_path, fitted, metrics)
    write_card_section(tmp_path, fitted, metrics)
    card = (tmp_path / "README.md").read_text()
    assert card.startswith("# domain head\n\nbody\n\n## Lexical companion")
    assert card.count("## Lexical companion") == 1
    assert "| test.jsonl | 10 | 0.8000 | 0.7000 | 0.9000 |" in card


def test_build_step_keeps_a_set_mix_and_says_so(tmp_path: Path) -> None:
    """`--mix` skips the choice on held-out rows (an encoder trained on them, e.g. a student)
    and `--adapter none` evaluates a head trained on the plain encoder; the card says which."""
    data = tmp_path / "train.jsonl"
    rows = [{"text": t, "label": label, "group": f"{label}-{i}"}
            for label in LABELS for i, t in enumerate(TRAIN[label])]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    torch.manual_seed(0)
    head = Head(HeadSpec(kind="linear", input_dim=384, labels=LABELS))
    head_dir = save_head(head, tmp_path / "domain", {
        "encoder": "sentence-transformers/all-MiniLM-L6-v2", "max_length": 32,
        "training": {"config": {"val_fraction": 0.25, "seed": 0}}})
    args = ["--data", str(data), "--head", str(head_dir), "--adapter", "none", "--min-df", "1",
            "--epochs", "5", "--eval", str(data)]
    assert main([*args, "--mix", "0.35"]) == 0
    config = json.loads((head_dir / CONFIG_FILE).read_text())
    assert config["mix"] == 0.35 and config["metrics"]["mix_set"] is True
    assert "set by `--mix`" in (head_dir / "README.md").read_text()
    assert main(args) == 0
    config = json.loads((head_dir / CONFIG_FILE).read_text())
    assert config["metrics"]["mix_set"] is False
    assert "best accuracy" in (head_dir / "README.md").read_text()
    with pytest.raises(SystemExit):
        main([*args, "--mix", "1.5"])
