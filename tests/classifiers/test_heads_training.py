"""Heads on disk, the training loop, the `train` CLI and the committed default heads."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from classifiers.adapter import default_encoder_id
from classifiers.heads import (
    CONFIG_FILE,
    MAX_HEAD_BYTES,
    WEIGHTS_FILE,
    Head,
    HeadFormatError,
    HeadSpec,
    head_size_bytes,
    load_head,
    save_head,
)
from classifiers.lexical import CONFIG_FILE as LEXICAL_CONFIG
from classifiers.lexical import MAX_LEXICAL_BYTES, load_lexical
from classifiers.lexical import WEIGHTS_FILE as LEXICAL_WEIGHTS
from classifiers.training import (
    TrainConfig,
    add_arguments,
    evaluate,
    read_jsonl,
    run,
    split_groups,
    train_head,
)

MODELS = Path(__file__).resolve().parents[2] / "classifiers" / "models"
DOMAIN_LABELS = (
    "biology", "business", "chemistry", "computer science", "economics", "engineering", "health",
    "history", "law", "math", "other", "philosophy", "physics", "psychology",
)  # fmt: skip


def _toy(n_per: int, labels: int, dim: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Well-separated Gaussian blobs on the unit sphere (like normalized embeddings)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(labels, dim)) * 3
    x = np.concatenate([c + rng.normal(scale=0.3, size=(n_per, dim)) for c in centers])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), np.repeat(np.arange(labels), n_per)


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_save_load_round_trip_gives_identical_predictions(tmp_path: Path, kind: str) -> None:
    torch.manual_seed(0)
    head = Head(HeadSpec(kind, 384, ("a", "b", "c"), hidden_size=64 if kind == "mlp" else 0))
    head.eval()
    emb = torch.nn.functional.normalize(torch.randn(8, 384), dim=1)
    out = save_head(head, tmp_path / "h", {"metrics": {"accuracy": 0.5}, "max_length": 128})
    loaded = load_head(out)
    assert loaded.labels == ("a", "b", "c")
    assert torch.equal(head(emb), loaded(emb))
    config = json.loads((out / CONFIG_FILE).read_text())
    assert config["kind"] == kind and config["max_length"] == 128
    assert config["metrics"] == {"accuracy": 0.5}
    assert (out / "README.md").read_text().startswith("# ")


def test_load_head_reports_missing_and_mismatched_files(tmp_path: Path) -> None:
    with pytest.raises(HeadFormatError, match="not a head directory"):
        load_head(tmp_path / "absent")
    out = save_head(Head(HeadSpec("linear", 16, ("x", "y"))), tmp_path / "h", {})
    config = json.loads((out / CONFIG_FILE).read_text())
    (out / CONFIG_FILE).write_text(json.dumps(config | {"labels": ["x", "y", "z"]}))
    with pytest.raises(HeadFormatError, match="do not match"):
        load_head(out)
    (out / WEIGHTS_FILE).unlink()
    with pytest.raises(HeadFormatError, match=r"missing head\.safetensors"):
        load_head(out)


def test_head_rejects_bad_specs_and_inputs() -> None:
    with pytest.raises(HeadFormatError):
        Head(HeadSpec("linear", 8, ("only",)))
    with pytest.raises(HeadFormatError):
        Head(HeadSpec("mlp", 8, ("a", "b"), hidden_size=0))
    with pytest.raises(ValueError, match="expected embeddings"):
        Head(HeadSpec("linear", 8, ("a", "b")))(torch.zeros(2, 9))


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_training_learns_separable_toy_data(kind: str) -> None:
    x, y = _toy(40, 3)
    config = TrainConfig(kind=kind, hidden_size=32, epochs=40, lr=1e-2, patience=40)
    head, report = train_head(x, y, ["a", "b", "c"], config)
    assert report["val_accuracy"] == 1.0
    assert evaluate(head, x, y)["accuracy"] == 1.0
    assert report["n_train"] + report["n_val"] == len(y)


def test_split_keeps_groups_together_and_every_label_in_train() -> None:
    y = np.array([0, 0, 0, 0, 1, 1])
    groups = ["g1", "g1", "g2", "g2", "g3", "g4"]
    train, val = split_groups(y, groups, fraction=0.5, seed=0)
    assert {groups[i] for i in train}.isdisjoint({groups[i] for i in val})
    assert set(y[train]) == {0, 1}


def _write(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows))
    return path


def test_cli_trains_a_head_from_jsonl(tmp_path: Path) -> None:
    cooking = [
        "How long should I bake banana bread?",
        "Best way to season a cast iron pan?",
        "How do I make fluffy pancakes?",
        "What spices go well in lentil soup?",
        "How do I caramelize onions?",
        "Recipe for a simple tomato pasta sauce",
    ]
    code = ["How do I reverse a list in Python?", "What does a segmentation fault mean in C?",
            "Explain async and await in JavaScript", "How do I write a SQL join?",
            "Fix this Rust borrow checker error", "How do I undo the last git commit?"]  # fmt: skip
    rows = [(t, "cooking") for t in cooking] + [(t, "code") for t in code]
    data = _write(tmp_path / "train.jsonl", rows)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "head"
    args = parser.parse_args([
        "--data", str(data), "--eval", str(data), "--out", str(out), "--labels", "code,cooking",
        "--epochs", "60", "--lr", "0.01", "--val-fraction", "0", "--cache-dir", str(tmp_path / "c"),
    ])  # fmt: skip
    assert run(args) == 0
    head = load_head(out)
    assert head.labels == ("code", "cooking")
    config = json.loads((out / CONFIG_FILE).read_text())
    assert config["metrics"]["eval"]["accuracy"] == 1.0
    assert config["encoder"] == default_encoder_id()  # the bundled MiniLM + bundled adapter
    assert list((tmp_path / "c").glob("*.npy"))  # embeddings cached for the next run


def test_cli_trains_on_the_int8_student_with_its_own_cache_entries(tmp_path: Path) -> None:
    from classifiers.encoder import bundled_student_dir

    rows = [("add two numbers in python", "code"), ("bake a loaf of bread", "cooking")] * 4
    data = _write(tmp_path / "train.jsonl", rows)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    common = ["--data", str(data), "--labels", "code,cooking", "--epochs", "2",
              "--val-fraction", "0", "--cache-dir", str(tmp_path / "c"),
              "--adapter", str(bundled_student_dir())]  # fmt: skip
    assert run(parser.parse_args([*common, "--out", str(tmp_path / "fp32")])) == 0
    int8_args = [*common, "--out", str(tmp_path / "int8"), "--quantize-int8"]
    assert run(parser.parse_args(int8_args)) == 0
    fp32, int8 = (json.loads((tmp_path / d / CONFIG_FILE).read_text()) for d in ("fp32", "int8"))
    student_id = "sentence-transformers/all-MiniLM-L6-v2+sr-student-l2"
    assert fp32["encoder"] == int8["encoder"] == student_id
    assert (fp32["encoder_int8"], int8["encoder_int8"]) == (False, True)
    # int8 embeddings differ from fp32 ones, so they were embedded and cached separately
    assert len(list((tmp_path / "c").glob("*.ids.npy"))) == 2


def test_committed_long_heads_fit_the_bundled_student() -> None:
    from classifiers.encoder import Encoder, bundled_student_dir

    student_id = Encoder.load(adapter=str(bundled_student_dir()), quantize=True).model_id
    for name, labels in (("domain", DOMAIN_LABELS), ("jailbreak", ("benign", "jailbreak"))):
        directory = MODELS / name / "long"
        assert load_head(directory).labels == labels
        config = json.loads((directory / CONFIG_FILE).read_text())
        assert (config["encoder"], config["encoder_int8"]) == (student_id, True)
        assert "Licence" in (directory / "README.md").read_text()


def test_cli_rejects_unknown_labels(tmp_path: Path) -> None:
    data = _write(tmp_path / "d.jsonl", [("a", "x"), ("b", "y")])
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--data", str(data), "--out", str(tmp_path / "o"), "--labels", "x"])
    assert run(args) == 2
    (tmp_path / "bad.jsonl").write_text('{"text": "no label"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        read_jsonl(tmp_path / "bad.jsonl")


@pytest.mark.parametrize(
    ("name", "labels"), [("domain", DOMAIN_LABELS), ("jailbreak", ("benign", "jailbreak"))]
)
def test_committed_default_heads_load(name: str, labels: tuple[str, ...]) -> None:
    directory = MODELS / name
    head = load_head(directory)
    assert head.labels == labels
    assert head.input_dim == 384
    assert head_size_bytes(directory) < MAX_HEAD_BYTES
    config = json.loads((directory / CONFIG_FILE).read_text())
    assert config["encoder"] == default_encoder_id()  # the bundled MiniLM + bundled adapter
    assert config["pooling"] == "mean"
    assert "Licence" in (directory / "README.md").read_text()
    lexical = load_lexical(directory, labels)
    if name == "domain":  # the bundled domain head ships its lexical companion
        assert lexical is not None and 0.0 < lexical.mix < 1.0
        size = sum((directory / f).stat().st_size for f in (LEXICAL_WEIGHTS, LEXICAL_CONFIG))
        assert size <= MAX_LEXICAL_BYTES
    else:
        assert lexical is None
