"""A lexical companion to a domain head: word and word-pair TF-IDF features into a linear layer.

The encoder sees meaning; exam-style questions are also told apart by their words ("tort",
"enthalpy", "GDP"), which a small 384-d embedding blurs. A head directory may carry a lexical
model next to its weights; the domain signal then averages the two: `p = (1 - mix) * p_head +
mix * p_lexical`, with `mix` chosen on held-out data by `classifiers.lexical_training`. (A
geometric mix was tried and dropped: where both models were unsure it could crown a third label.)

Features (`tokens`): the text is lower-cased and split into unicode word runs (`\\w+`) over its
first `MAX_CHARS` characters; features are the words and adjacent word pairs. Values are
sublinear term frequency (1 + ln n) times the training idf, L2-normalized per text. Features not in
the vocabulary are dropped. Inference gathers the rows of the present features and sums them
(numpy): no set-up on the hot path.

On disk (inside a head directory): `lexical.safetensors` (`idf` [V], `weight` [V, L] as fp16,
`bias` [L]) and `lexical.json` (format, labels, mix, vocabulary in row order, metrics).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

WEIGHTS_FILE = "lexical.safetensors"
CONFIG_FILE = "lexical.json"
FORMAT = "word-1-2gram-tfidf-v1"
MAX_CHARS = 32_768
MAX_LEXICAL_BYTES = 6 * 1024 * 1024
_WORD = re.compile(r"\w+")
# ASCII text (most prompts) splits 4-5x faster as bytes: every byte `\w` does not match (in
# ASCII: letters, digits, `_`) becomes a space, then `split()`; the same words as `_WORD`.
_ASCII_NON_WORD = bytes(c if chr(c).isalnum() or c == ord("_") else ord(" ") for c in range(256))


class LexicalFormatError(ValueError):
    """The lexical files of a head directory are missing pieces or disagree with the head."""


def words_of(text: str) -> list[str]:
    """Lower-cased unicode word runs (`\\w+`) of the first `MAX_CHARS` characters of `text`."""
    lowered = text[:MAX_CHARS].lower()
    if lowered.isascii():
        return lowered.encode("ascii").translate(_ASCII_NON_WORD).decode("ascii").split()
    return _WORD.findall(lowered)


def tokens(text: str) -> list[str]:
    """Words and adjacent word pairs of `text` (lower-cased, first `MAX_CHARS` characters)."""
    words = words_of(text)
    return words + list(map(" ".join, pairwise(words)))


class LexicalModel:
    """TF-IDF features -> logits `[L]`; `log_probs(text)` is what the domain signal mixes in."""

    def __init__(
        self,
        vocab: Sequence[str],
        idf: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        labels: Sequence[str],
        mix: float,
    ) -> None:
        if not (len(vocab) == len(idf) == weight.shape[0]) or weight.shape[1] != len(labels):
            raise LexicalFormatError(
                f"lexical model shapes disagree: vocab {len(vocab)}, idf {list(idf.shape)}, "
                f"weight {list(weight.shape)}, labels {len(labels)}"
            )
        if not 0.0 <= mix <= 1.0:
            raise LexicalFormatError(f"lexical mix must be within [0, 1], got {mix}")
        self.index = {feature: i for i, feature in enumerate(vocab)}
        self.idf = idf.float()
        self.weight = weight.float()
        self.bias = bias.float()
        self.labels = tuple(labels)
        self.mix = float(mix)
        # numpy views for inference: a few small numpy calls beat torch's per-op overhead here
        self._idf = self.idf.numpy()
        self._weight = self.weight.numpy()
        self._bias = self.bias.numpy()

    def features(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(feature rows, L2-normalized tf-idf values) of one text; both empty when none."""
        counts = Counter(map(self.index.get, tokens(text)))  # C loops: no per-token bytecode
        counts.pop(None, None)  # features outside the vocabulary
        rows = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        tf = 1.0 + np.log(np.fromiter(counts.values(), dtype=np.float32, count=len(counts)))
        values = tf * self._idf[rows]
        return rows, values / max(float(np.linalg.norm(values)), 1e-12)

    def log_probs(self, text: str) -> torch.Tensor:
        """Log-probabilities `[L]`; a text with no known feature gets the bias (the priors)."""
        rows, values = self.features(text)
        logits = values @ self._weight[rows] + self._bias
        shifted = logits - logits.max()
        return torch.from_numpy(shifted - np.log(np.exp(shifted).sum()))


def mix_probs(head_probs: torch.Tensor, lexical: torch.Tensor, mix: float) -> torch.Tensor:
    """`(1 - mix) * head_probs + mix * exp(lexical)` (`lexical` holds log-probabilities)."""
    return (1.0 - mix) * head_probs + mix * lexical.exp()


def save_lexical(
    directory: str | Path, model: LexicalModel, metrics: Mapping[str, Any] | None = None
) -> int:
    """Write the two lexical files into a head directory; returns their size in bytes."""
    out = Path(directory)
    vocab = sorted(model.index, key=model.index.__getitem__)
    tensors = {
        "idf": model.idf.contiguous(),
        "weight": model.weight.to(torch.float16).contiguous(),
        "bias": model.bias.contiguous(),
    }
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": FORMAT})
    (out / WEIGHTS_FILE).chmod(0o644)
    config = {
        "format": FORMAT,
        "labels": list(model.labels),
        "mix": round(model.mix, 4),
        "metrics": dict(metrics or {}),
        "vocab": vocab,
    }
    (out / CONFIG_FILE).write_text(json.dumps(config, ensure_ascii=False) + "\n")
    size = sum((out / name).stat().st_size for name in (WEIGHTS_FILE, CONFIG_FILE))
    if size > MAX_LEXICAL_BYTES:
        raise LexicalFormatError(f"lexical files are {size} bytes, over {MAX_LEXICAL_BYTES}")
    return size


def load_lexical(directory: str | Path, labels: Sequence[str]) -> LexicalModel | None:
    """The lexical model of a head directory, or None when it has none.

    Raises `LexicalFormatError` when one of the two files is missing, unreadable, of another
    format, or its labels differ from the head's `labels` (the mix is per label column).
    """
    path = Path(directory)
    present = [(path / name).is_file() for name in (WEIGHTS_FILE, CONFIG_FILE)]
    if not any(present):
        return None
    if not all(present):
        raise LexicalFormatError(f"{path}: needs both {WEIGHTS_FILE} and {CONFIG_FILE}")
    try:
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
        tensors = load_file(str(path / WEIGHTS_FILE), device="cpu")
    except Exception as err:  # json and safetensors raise their own error types
        raise LexicalFormatError(f"{path}: unreadable lexical model: {err}") from err
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise LexicalFormatError(f"{path / CONFIG_FILE}: format must be {FORMAT!r}")
    if list(config.get("labels", [])) != list(labels):
        raise LexicalFormatError(
            f"{path / CONFIG_FILE}: labels {config.get('labels')} differ from the head's "
            f"{list(labels)}"
        )
    if set(tensors) != {"idf", "weight", "bias"}:
        raise LexicalFormatError(f"{path / WEIGHTS_FILE}: expected idf, weight and bias")
    if not all(bool(torch.isfinite(t.float()).all()) for t in tensors.values()):
        raise LexicalFormatError(f"{path / WEIGHTS_FILE}: weights contain NaN or inf")
    return LexicalModel(
        config["vocab"], tensors["idf"], tensors["weight"], tensors["bias"], labels,
        float(config.get("mix", 0.0)),
    )
