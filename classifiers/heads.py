"""Classification heads over the shared encoder's pooled embedding, and their on-disk format.

A head is a tiny module (a linear layer or a one-hidden-layer MLP) that maps an L2-normalized
embedding `[N, D]` to logits `[N, L]`. Heads never see text: the encoder runs once per request and
its embedding feeds every head, so a head must record which encoder, pooling and truncation it was
trained with; a mismatch would silently shift its inputs, so `load_head` surfaces them and the
runtime compares them with its encoder.

On disk a head is a directory with three files (a domain head may also carry the two files of
its lexical companion, `classifiers.lexical`):
  * `head.safetensors`: the weights (no pickle: loading never executes code);
  * `head.json`: kind, dims, labels, encoder id, pooling, max_length, metrics, training details;
  * `README.md`: the model card a person reads.
Heads must stay small (`MAX_HEAD_BYTES`), because the defaults are committed to the repository.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import torch
from safetensors.torch import load_file, save_file

from classifiers.adapter import default_encoder_id

HeadKind = Literal["linear", "mlp"]
HEAD_KINDS: tuple[HeadKind, ...] = ("linear", "mlp")
FORMAT_VERSION = 1
WEIGHTS_FILE = "head.safetensors"
CONFIG_FILE = "head.json"
CARD_FILE = "README.md"
MAX_HEAD_BYTES = 2 * 1024 * 1024
DEFAULT_POOLING = "mean"


class HeadFormatError(ValueError):
    """A head directory is missing a file, or its files disagree with each other."""


@dataclass(frozen=True)
class HeadSpec:
    """The shape of a head: what `Head.__init__` needs and what `head.json` records."""

    kind: HeadKind
    input_dim: int
    labels: tuple[str, ...]
    hidden_size: int = 0
    dropout: float = 0.0

    def validate(self) -> None:
        """Raise `HeadFormatError` for an impossible spec (checked before building tensors)."""
        if self.kind not in HEAD_KINDS:
            raise HeadFormatError(f"kind must be one of {HEAD_KINDS}, got {self.kind!r}")
        if self.input_dim <= 0:
            raise HeadFormatError(f"input_dim must be positive, got {self.input_dim}")
        if len(self.labels) < 2:
            raise HeadFormatError(f"a head needs at least 2 labels, got {list(self.labels)}")
        if len(set(self.labels)) != len(self.labels):
            raise HeadFormatError(f"labels must be unique, got {list(self.labels)}")
        if self.kind == "mlp" and self.hidden_size <= 0:
            raise HeadFormatError("an mlp head needs hidden_size > 0")


class Head(torch.nn.Module):
    """Linear or MLP classifier over an embedding: `forward(emb[N, D]) -> logits[N, L]`.

    `labels[i]` names logit column `i`. The MLP is Linear -> GELU -> Dropout -> Linear; dropout is
    active only in training mode, so call `.eval()` (as `load_head` does) before inference.
    """

    def __init__(self, spec: HeadSpec) -> None:
        spec.validate()
        super().__init__()
        self.spec = spec
        self.labels: tuple[str, ...] = spec.labels
        n_labels = len(spec.labels)
        if spec.kind == "linear":
            self.net: torch.nn.Module = torch.nn.Linear(spec.input_dim, n_labels)
        else:
            self.net = torch.nn.Sequential(
                torch.nn.Linear(spec.input_dim, spec.hidden_size),
                torch.nn.GELU(),
                torch.nn.Dropout(spec.dropout),
                torch.nn.Linear(spec.hidden_size, n_labels),
            )

    @property
    def input_dim(self) -> int:
        """Embedding width the head expects."""
        return self.spec.input_dim

    def forward(self, emb: torch.Tensor) -> torch.Tensor:
        """Logits `[N, L]` for embeddings `[N, input_dim]`."""
        if emb.dim() != 2 or emb.shape[1] != self.spec.input_dim:
            raise ValueError(
                f"expected embeddings [N, {self.spec.input_dim}], got {list(emb.shape)}"
            )
        return cast(torch.Tensor, self.net(emb))

    def predict_proba(self, emb: torch.Tensor) -> torch.Tensor:
        """Softmax probabilities `[N, L]` (inference mode, no grad)."""
        with torch.inference_mode():
            return torch.softmax(self.forward(emb.float()), dim=-1)


def _card_markdown(config: Mapping[str, Any], card: Mapping[str, Any]) -> str:
    """Render the README.md model card; free-text sections come from `card["sections"]`."""
    title = str(card.get("title", f"{config['kind']} head: {', '.join(config['labels'])}"))
    lines = [f"# {title}", ""]
    if "summary" in card:
        lines += [str(card["summary"]), ""]
    lines += [
        "| field | value |",
        "|---|---|",
        f"| kind | `{config['kind']}` (hidden {config['hidden_size']}) |",
        f"| input | {config['input_dim']}-d `{config['pooling']}`-pooled, L2-normalized "
        "embedding |",
        f"| encoder | `{config['encoder']}` (max_length {config['max_length']}"
        + (", dynamic int8" if config.get("encoder_int8") else "") + ") |",
        f"| labels | {', '.join(f'`{label}`' for label in config['labels'])} |",
        "",
    ]
    sections = card.get("sections", {})
    for heading, body in cast(Mapping[str, str], sections).items():
        lines += [f"## {heading}", "", body.rstrip(), ""]
    lines += _metrics_markdown(config.get("metrics") or {}, config["labels"])
    return "\n".join(lines)


def _metrics_markdown(metrics: Mapping[str, Any], labels: Sequence[str]) -> list[str]:
    """Measured numbers as tables (the full copy stays in head.json `metrics`)."""
    if not metrics:
        return []
    lines = ["## Measured", ""]
    if metrics.get("validation_accuracy") is not None:
        lines += [f"Early-stopping validation accuracy: {metrics['validation_accuracy']:.4f}", ""]
    evaluation = metrics.get("eval")
    if isinstance(evaluation, Mapping):
        lines += [
            f"On `{evaluation.get('file', 'eval')}` ({evaluation['n']} examples): accuracy "
            f"**{evaluation['accuracy']:.4f}**, macro-F1 {evaluation['macro_f1']:.4f}.",
            "",
            "| label | precision | recall | support |",
            "|---|---|---|---|",
        ]
        for label, m in evaluation["per_label"].items():
            lines.append(f"| {label} | {m['precision']:.3f} | {m['recall']:.3f} | {m['support']} |")
        lines.append("")
        sweep = evaluation.get("thresholds") or {}
        if sweep:
            positive = labels[-1]
            lines += [
                f"`{positive}` when its probability >= threshold:",
                "",
                "| threshold | recall | false-positive rate |",
                "|---|---|---|",
            ]
            for threshold, m in sweep.items():
                lines.append(f"| {threshold} | {m['recall']:.3f} | {m['fpr']:.4f} |")
            lines.append("")
        sources = evaluation.get("per_source") or {}
        if sources:
            lines += [
                "Per source (for a single-label source, accuracy is that label's recall):",
                "",
                "| source | labels | n | accuracy |",
                "|---|---|---|---|",
            ]
            for source, m in sources.items():
                labels = ", ".join(m["labels"])
                lines.append(f"| {source} | {labels} | {m['n']} | {m['accuracy']:.3f} |")
            lines.append("")
    return lines


def save_head(head: Head, directory: str | Path, card: Mapping[str, Any]) -> Path:
    """Write `head.safetensors`, `head.json` and `README.md` into `directory` (created).

    `card` keys used: `encoder` (id, default the bundled MiniLM with its bundled adapter),
    `encoder_int8` (trained on its dynamic-int8 embeddings, default false), `pooling` (default
    "mean"), `max_length` (default 256), `metrics` (dict), `training` (dict), and for README.md
    only `title`, `summary`, `sections` (heading -> markdown). Raises `HeadFormatError` if the
    weights would exceed `MAX_HEAD_BYTES`.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    spec = head.spec
    config: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "kind": spec.kind,
        "input_dim": spec.input_dim,
        "hidden_size": spec.hidden_size,
        "dropout": spec.dropout,
        "labels": list(spec.labels),
        "encoder": str(card.get("encoder") or default_encoder_id()),
        "encoder_int8": bool(card.get("encoder_int8", False)),
        "pooling": str(card.get("pooling", DEFAULT_POOLING)),
        "normalize": True,
        "max_length": int(card.get("max_length", 256)),
        "metrics": dict(card.get("metrics", {})),
        "training": dict(card.get("training", {})),
    }
    # Contiguous fp32 copies: safetensors refuses shared or non-contiguous storage.
    tensors = {
        k: v.detach().to("cpu", torch.float32).contiguous() for k, v in head.state_dict().items()
    }
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    if size > MAX_HEAD_BYTES:
        raise HeadFormatError(f"head weights are {size} bytes, over the {MAX_HEAD_BYTES} limit")
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format_version": str(FORMAT_VERSION)})
    (out / WEIGHTS_FILE).chmod(0o644)  # safetensors creates 0600; heads are shipped and shared
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out / CARD_FILE).write_text(_card_markdown(config, card))
    return out


def read_head_config(directory: str | Path) -> dict[str, Any]:
    """Parse and check `head.json` of a head directory (no torch work)."""
    path = Path(directory)
    if not path.is_dir():
        raise HeadFormatError(f"{path}: not a head directory (does not exist or is a file)")
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        if not (path / name).is_file():
            raise HeadFormatError(f"{path}: missing {name}")
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise HeadFormatError(f"{path / CONFIG_FILE}: not valid JSON: {err}") from err
    if not isinstance(config, dict):
        raise HeadFormatError(f"{path / CONFIG_FILE}: expected a JSON object")
    if config.get("format_version") != FORMAT_VERSION:
        raise HeadFormatError(
            f"{path / CONFIG_FILE}: format_version {config.get('format_version')!r} "
            f"is not supported (expected {FORMAT_VERSION})"
        )
    missing = [
        k for k in ("kind", "input_dim", "labels", "encoder", "max_length") if k not in config
    ]
    if missing:
        raise HeadFormatError(f"{path / CONFIG_FILE}: missing keys {missing}")
    return config


def spec_from_config(config: Mapping[str, Any]) -> HeadSpec:
    """The `HeadSpec` recorded in a parsed `head.json`."""
    labels = config["labels"]
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise HeadFormatError("head.json: labels must be a list of strings")
    spec = HeadSpec(
        kind=cast(HeadKind, config["kind"]),
        input_dim=int(config["input_dim"]),
        labels=tuple(labels),
        hidden_size=int(config.get("hidden_size", 0)),
        dropout=float(config.get("dropout", 0.0)),
    )
    spec.validate()
    return spec


def load_head(directory: str | Path) -> Head:
    """Load a head saved by `save_head`, in eval mode on CPU.

    Raises `HeadFormatError` naming the file and problem when a file is missing, `head.json` is
    malformed, or the weights' names/shapes do not match the recorded kind, dims and labels.
    """
    path = Path(directory)
    config = read_head_config(path)
    head = Head(spec_from_config(config))
    try:
        tensors = load_file(str(path / WEIGHTS_FILE), device="cpu")
    except Exception as err:  # safetensors raises its own error types for corrupt files
        raise HeadFormatError(f"{path / WEIGHTS_FILE}: unreadable: {err}") from err
    expected = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in tensors.items()}
    if expected != found:
        raise HeadFormatError(
            f"{path / WEIGHTS_FILE}: tensors {found} do not match head.json "
            f"(kind={config['kind']}, labels={len(head.labels)}): expected {expected}"
        )
    head.load_state_dict(tensors)
    for tensor in tensors.values():
        if not bool(torch.isfinite(tensor).all()):
            raise HeadFormatError(f"{path / WEIGHTS_FILE}: weights contain NaN or inf")
    head.eval()
    return head


def head_size_bytes(directory: str | Path) -> int:
    """Total bytes of the head's own three files (for the size budget; a lexical companion has
    its own, `classifiers.lexical.MAX_LEXICAL_BYTES`)."""
    path = Path(directory)
    return sum((path / name).stat().st_size for name in (WEIGHTS_FILE, CONFIG_FILE, CARD_FILE))
