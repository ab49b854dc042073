"""Fixtures for classifier tests: tiny random BERT models on disk and tiny heads.

Nothing here downloads: HF_HUB_OFFLINE is forced before transformers is imported, tiny models are
built with random weights and saved to a temporary directory, and the shared encoder is the
bundled all-MiniLM-L6-v2.
"""

from __future__ import annotations

import os

# Set before transformers is imported: it reads these once, at import time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path

import pytest
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertTokenizerFast,
)

from classifiers.heads import Head, HeadSpec, save_head

WORDS = ("alice", "bob", "paris", "london", "the", "weather", "is", "nice", "in", "lives", "code")
TOKEN_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
SEQUENCE_LABELS = {0: "chat", 1: "code", 2: "math"}


def _tiny_config(id2label: dict[int, str]) -> BertConfig:
    return BertConfig(
        vocab_size=5 + len(WORDS),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )


def _save_tiny(path: Path, model: torch.nn.Module) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n"
    )
    # transformers 5 ignores `vocab_file=`; from_pretrained on the directory reads vocab.txt.
    tokenizer = BertTokenizerFast.from_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    model.save_pretrained(str(path))  # type: ignore[operator]
    return path


@pytest.fixture(scope="session")
def tiny_sequence_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = BertForSequenceClassification(_tiny_config(SEQUENCE_LABELS))
    return _save_tiny(tmp_path_factory.mktemp("tiny-seq"), model)


@pytest.fixture(scope="session")
def tiny_token_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = BertForTokenClassification(_tiny_config(TOKEN_LABELS))
    return _save_tiny(tmp_path_factory.mktemp("tiny-tok"), model)


def make_head(path: Path, labels: tuple[str, ...], seed: int = 0, dim: int = 384) -> Path:
    """A random linear head saved in the real on-disk format."""
    torch.manual_seed(seed)
    head = Head(HeadSpec(kind="linear", input_dim=dim, labels=labels))
    return save_head(head, path, {"title": "test head"})


@pytest.fixture(scope="session")
def head_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("heads")
    return {
        "domain": make_head(root / "domain", ("math", "code", "chat", "law"), seed=1),
        "jailbreak": make_head(root / "jailbreak", ("benign", "jailbreak"), seed=2),
    }


@pytest.fixture(scope="session")
def head_factory() -> object:
    """`make_head` for tests (test modules here are not a package, so they cannot import it)."""
    return make_head


@pytest.fixture(scope="session")
def tiny_labels() -> dict[str, dict[int, str]]:
    return {"sequence": SEQUENCE_LABELS, "token": TOKEN_LABELS}
