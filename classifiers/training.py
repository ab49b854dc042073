"""Train a classification head over the frozen shared encoder, on CPU, from labelled JSONL.

Input lines are `{"text": str, "label": str}`, optionally with `"group": str`: rows sharing a group
(e.g. augmented variants of one question) always land on the same side of the early-stopping
split, so the held-out score is not inflated by near-duplicates. The encoder is frozen: texts are
embedded once (optionally cached as `.npy`, keyed by encoder, max_length and the texts), then a
`Head` is trained with AdamW + class-weighted cross-entropy and early stopping on a stratified
held-out slice of the training data. Everything here is a build/training step, never run by the
router at request time; it never imports grpc or `extproc/`.

CLI (wired by the lead as `semantic-router train`): see `add_arguments` / `run`.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from classifiers.heads import Head, HeadKind, HeadSpec, save_head

EmbedFn = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Example:
    """One labelled text; `group` ties augmented variants together; `source` names its origin."""

    text: str
    label: str
    group: str
    source: str = ""


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters; the defaults train a good MLP head on ~10k examples in under a minute."""

    kind: HeadKind = "mlp"
    hidden_size: int = 256
    dropout: float = 0.1
    epochs: int = 60
    batch_size: int = 128
    lr: float = 2e-3
    weight_decay: float = 1e-2
    label_smoothing: float = 0.05
    val_fraction: float = 0.1
    patience: int = 8
    class_weights: bool = True
    seed: int = 0


def read_jsonl(path: str | Path) -> list[Example]:
    """Parse labelled JSONL; raises `ValueError` naming the line of a malformed row."""
    rows: list[Example] = []
    with Path(path).open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                text, label = obj["text"], obj["label"]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{lineno}: expected {{'text', 'label'}}: {err}") from err
            if not isinstance(text, str) or not isinstance(label, str) or not text.strip():
                raise ValueError(f"{path}:{lineno}: text and label must be non-empty strings")
            group = str(obj.get("group", f"{path}:{lineno}"))
            rows.append(Example(text, label, group, str(obj.get("source", ""))))
    if not rows:
        raise ValueError(f"{path}: no examples")
    return rows


def _progress(label: str, done: int, total: int, started: float) -> None:
    """One self-overwriting stderr line; plain text so it works in logs and CI too."""
    rate = done / max(time.monotonic() - started, 1e-6)
    end = "\n" if done >= total else ""
    print(f"\r{label}: {done}/{total} ({rate:.0f}/s)", end=end, file=sys.stderr, flush=True)


def embed_with_encoder(encoder: Any, batch_size: int = 64, label: str = "embed") -> EmbedFn:
    """An `EmbedFn` over a `classifiers.encoder.Encoder`, length-sorted to cut padding waste."""

    def embed(texts: Sequence[str]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), encoder.dim), dtype=np.float32)
        started = time.monotonic()
        step = batch_size * 8
        for start in range(0, len(order), step):
            idx = order[start : start + step]
            out[idx] = encoder.embed([texts[i] for i in idx], batch_size=batch_size).numpy()
            _progress(label, min(start + step, len(order)), len(order), started)
        return out

    return embed


def _text_ids(key: str, texts: Sequence[str]) -> list[bytes]:
    """16-byte ids of (encoder key, text): the cache never mixes encoders or truncation."""
    prefix = key.encode() + b"\0"
    return [
        hashlib.blake2b(prefix + t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        for t in texts
    ]


def cached_embed(embed: EmbedFn, texts: Sequence[str], cache: Path | None, key: str) -> np.ndarray:
    """`embed(texts)`, reusing per-text vectors stored under `cache` by earlier runs.

    Each run that embeds something new adds one shard (`emb-*.npy` + `emb-*.ids.npy`), so a
    re-run with augmented or extra rows only embeds the texts it has not seen before.
    """
    if cache is None:
        return embed(texts)
    ids = _text_ids(key, texts)
    known: dict[bytes, np.ndarray] = {}
    for ids_path in sorted(cache.glob("emb-*.ids.npy")):
        vectors = np.load(ids_path.with_name(ids_path.name.replace(".ids.npy", ".npy")))
        for row, text_id in enumerate(np.load(ids_path)):
            known[text_id.tobytes()] = vectors[row]
    # One index per distinct unseen text (duplicates in `texts` are embedded once).
    unique = list({t: i for i, t in reversed(list(enumerate(ids))) if t not in known}.values())
    if unique:
        fresh = embed([texts[i] for i in unique])
        cache.mkdir(parents=True, exist_ok=True)
        shard = hashlib.sha256(b"".join(ids[i] for i in unique)).hexdigest()[:20]
        np.save(cache / f"emb-{shard}.npy", fresh)
        np.save(
            cache / f"emb-{shard}.ids.npy",
            np.frombuffer(b"".join(ids[i] for i in unique), np.uint8).reshape(-1, 16),
        )
        known.update({ids[i]: fresh[row] for row, i in enumerate(unique)})
    return np.stack([known[text_id] for text_id in ids]).astype(np.float32, copy=False)


def split_groups(
    y: np.ndarray, groups: Sequence[str], fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Stratified-by-label split of whole groups: (train_idx, val_idx); val empty if fraction=0."""
    rng = np.random.default_rng(seed)
    first_label: dict[str, int] = {}
    for i, group in enumerate(groups):
        first_label.setdefault(group, int(y[i]))
    val_groups: set[str] = set()
    for label in sorted(set(first_label.values())):
        members = sorted(g for g, lab in first_label.items() if lab == label)
        rng.shuffle(members)
        # Never take every group of a label: the head must see each label in training.
        n_val = min(round(len(members) * fraction), len(members) - 1)
        val_groups.update(members[:n_val])
    in_val = np.array([g in val_groups for g in groups])
    return np.flatnonzero(~in_val), np.flatnonzero(in_val)


def evaluate(head: Head, x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """Accuracy, macro-F1 and per-label precision/recall/f1/support for integer labels `y`."""
    head.eval()
    with torch.inference_mode():
        pred = head(torch.from_numpy(x)).argmax(dim=1).numpy()
    per_label: dict[str, dict[str, float]] = {}
    for i, name in enumerate(head.labels):
        tp = int(((pred == i) & (y == i)).sum())
        predicted, actual = int((pred == i).sum()), int((y == i).sum())
        precision = tp / predicted if predicted else 0.0
        recall = tp / actual if actual else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_label[name] = {
            "precision": round(precision, 4),
            "recall": round(recall, 4),
            "f1": round(f1, 4),
            "support": actual,
        }
    present = [m["f1"] for m in per_label.values() if m["support"]]
    return {
        "n": len(y),
        "accuracy": round(float((pred == y).mean()) if len(y) else 0.0, 4),
        "macro_f1": round(float(np.mean(present)) if present else 0.0, 4),
        "per_label": per_label,
    }


def per_source_accuracy(
    head: Head, x: np.ndarray, y: np.ndarray, examples: Sequence[Example]
) -> dict[str, dict[str, Any]]:
    """Accuracy per `source` (with its label mix): recall for attack sources, 1 - FPR for benign."""
    out: dict[str, dict[str, Any]] = {}
    for source in sorted({e.source for e in examples if e.source}):
        idx = np.array([i for i, e in enumerate(examples) if e.source == source])
        labels = sorted({examples[i].label for i in idx})
        out[source] = {
            "n": len(idx),
            "labels": labels,
            "accuracy": evaluate(head, x[idx], y[idx])["accuracy"],
        }
    return out


def threshold_sweep(head: Head, x: np.ndarray, y: np.ndarray) -> dict[str, dict[str, float]]:
    """For a 2-label head: recall and false-positive rate of label 1 at probability thresholds."""
    probs = head.predict_proba(torch.from_numpy(x))[:, 1].numpy()
    positive = y == 1
    out: dict[str, dict[str, float]] = {}
    for threshold in (0.5, 0.6, 0.7, 0.8, 0.9):
        flagged = probs >= threshold
        out[f"{threshold:.1f}"] = {
            "recall": round(float(flagged[positive].mean()) if positive.any() else 0.0, 4),
            "fpr": round(float(flagged[~positive].mean()) if (~positive).any() else 0.0, 4),
        }
    return out


def train_head(
    x: np.ndarray,
    y: np.ndarray,
    labels: Sequence[str],
    config: TrainConfig,
    groups: Sequence[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[Head, dict[str, Any]]:
    """Train a head on embeddings `x [N, D]` and label ids `y [N]`; returns (head, report).

    Early stopping keeps the weights with the best held-out accuracy (ties: lower loss) and
    stops after `patience` epochs without improvement. With `val_fraction=0` it trains all epochs.
    """
    torch.manual_seed(config.seed)
    groups = list(groups) if groups is not None else [str(i) for i in range(len(y))]
    train_idx, val_idx = split_groups(y, groups, config.val_fraction, config.seed)
    spec = HeadSpec(
        config.kind,
        int(x.shape[1]),
        tuple(labels),
        config.hidden_size if config.kind == "mlp" else 0,
        config.dropout if config.kind == "mlp" else 0.0,
    )
    head = Head(spec)
    xt, yt = torch.from_numpy(x[train_idx]), torch.from_numpy(y[train_idx]).long()
    counts = torch.bincount(yt, minlength=len(labels)).float()
    weight = None
    if config.class_weights:
        # Inverse-frequency weights, mean 1 over present labels: rare labels are not drowned out.
        weight = torch.where(counts > 0, counts.sum() / (counts.clamp(min=1) * len(labels)), 0.0)
    loss_fn = torch.nn.CrossEntropyLoss(weight=weight, label_smoothing=config.label_smoothing)
    opt = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(config.epochs, 1))
    gen = torch.Generator().manual_seed(config.seed)
    best: tuple[float, float] = (-1.0, float("inf"))
    best_state, best_epoch, history = copy.deepcopy(head.state_dict()), 0, []
    started = time.monotonic()
    for epoch in range(1, config.epochs + 1):
        head.train()
        total = 0.0
        for batch in torch.randperm(len(yt), generator=gen).split(config.batch_size):
            opt.zero_grad()
            loss = loss_fn(head(xt[batch]), yt[batch])
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(batch)
        sched.step()
        row = {"epoch": epoch, "train_loss": round(total / max(len(yt), 1), 4)}
        if len(val_idx):
            metrics = evaluate(head, x[val_idx], y[val_idx])
            with torch.inference_mode():
                val_loss = float(
                    loss_fn(head(torch.from_numpy(x[val_idx])), torch.from_numpy(y[val_idx]).long())
                )
            row.update(val_accuracy=metrics["accuracy"], val_loss=round(val_loss, 4))
            if (metrics["accuracy"], -val_loss) > (best[0], -best[1]):
                best, best_state, best_epoch = (
                    (metrics["accuracy"], val_loss),
                    copy.deepcopy(head.state_dict()),
                    epoch,
                )
        else:
            best_state, best_epoch = copy.deepcopy(head.state_dict()), epoch
        history.append(row)
        if log:
            log(
                f"epoch {epoch}/{config.epochs} "
                + " ".join(f"{k}={v}" for k, v in row.items() if k != "epoch")
            )
        if len(val_idx) and epoch - best_epoch >= config.patience:
            break
    head.load_state_dict(best_state)
    head.eval()
    report = {
        "config": asdict(config),
        "n_train": len(train_idx),
        "n_val": len(val_idx),
        "best_epoch": best_epoch,
        "epochs_run": len(history),
        "val_accuracy": best[0] if len(val_idx) else None,
        "seconds": round(time.monotonic() - started, 1),
    }
    return head, report


def label_ids(examples: Sequence[Example], labels: Sequence[str], path: str) -> np.ndarray:
    """Integer ids of each example's label; unknown labels raise `ValueError` naming them."""
    index = {name: i for i, name in enumerate(labels)}
    unknown = sorted({e.label for e in examples} - index.keys())
    if unknown:
        raise ValueError(f"{path}: labels {unknown} are not in --labels {list(labels)}")
    return np.array([index[e.label] for e in examples], dtype=np.int64)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `semantic-router train`."""
    parser.add_argument("--data", required=True, help="training JSONL: {text, label[, group]}")
    parser.add_argument(
        "--labels", help="comma-separated label order (default: sorted labels found)"
    )
    parser.add_argument("--out", required=True, help="output head directory")
    parser.add_argument("--eval", help="JSONL to report accuracy and per-label metrics on")
    parser.add_argument("--kind", choices=["mlp", "linear"], default="mlp")
    parser.add_argument("--hidden", type=int, default=TrainConfig.hidden_size)
    parser.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    parser.add_argument("--lr", type=float, default=TrainConfig.lr)
    parser.add_argument("--patience", type=int, default=TrainConfig.patience)
    parser.add_argument("--val-fraction", type=float, default=TrainConfig.val_fraction)
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument("--encoder", help="encoder directory (default: bundled all-MiniLM-L6-v2)")
    add_adapter_option(parser)
    parser.add_argument("--max-length", type=int, default=256, help="encoder truncation (tokens)")
    parser.add_argument("--device", default="cpu", help="encoder device: cpu | cuda | cuda:N")
    parser.add_argument("--cache-dir", help="cache embeddings here as .npy (reused across runs)")
    parser.add_argument(
        "--quantize-int8", action="store_true",
        help="train on the encoder's dynamic-int8 embeddings (CPU), as the long-prompt "
        "student runs (classifiers.long_prompts.quantize_int8)",
    )
    parser.add_argument(
        "--card", help="JSON file with model-card fields (title, summary, sections)"
    )


def run(args: argparse.Namespace) -> int:
    """Train, evaluate and save a head; returns a process exit code (0 ok, 2 bad input)."""
    from classifiers.encoder import Encoder  # deferred: loading transformers is slow

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        train = read_jsonl(args.data)
        evaluation = read_jsonl(args.eval) if args.eval else []
        labels = (
            [x.strip() for x in args.labels.split(",") if x.strip()]
            if args.labels
            else sorted({e.label for e in train})
        )
        y = label_ids(train, labels, args.data)
        y_eval = label_ids(evaluation, labels, args.eval) if evaluation else None
        card: dict[str, Any] = json.loads(Path(args.card).read_text()) if args.card else {}
    except (OSError, ValueError) as err:
        log(f"error: {err}")
        return 2
    encoder = Encoder.load(
        args.encoder,
        device=args.device,
        max_length=args.max_length,
        adapter=args.adapter,
        quantize=args.quantize_int8,
    )
    key = f"{encoder.model_id}|{encoder.max_length}|mean|l2"
    if args.quantize_int8:
        key += "|int8"  # int8 embeddings differ from fp32 ones: never share a cache entry
    cache = Path(args.cache_dir) if args.cache_dir else None
    embed = embed_with_encoder(encoder, label="embed train")
    x = cached_embed(embed, [e.text for e in train], cache, key)
    config = TrainConfig(
        kind=args.kind,
        hidden_size=args.hidden,
        epochs=args.epochs,
        lr=args.lr,
        patience=args.patience,
        val_fraction=args.val_fraction,
        seed=args.seed,
    )
    head, report = train_head(x, y, labels, config, [e.group for e in train], log)
    metrics: dict[str, Any] = {"validation_accuracy": report["val_accuracy"]}
    if y_eval is not None:
        embed_eval = embed_with_encoder(encoder, label="embed eval")
        x_eval = cached_embed(embed_eval, [e.text for e in evaluation], cache, key)
        metrics["eval"] = evaluate(head, x_eval, y_eval) | {"file": Path(args.eval).name}
        if len(labels) == 2:
            metrics["eval"]["thresholds"] = threshold_sweep(head, x_eval, y_eval)
        by_source = per_source_accuracy(head, x_eval, y_eval, evaluation)
        if by_source:
            metrics["eval"]["per_source"] = by_source
            for source, m in by_source.items():
                log(f"  source {source}: accuracy {m['accuracy']:.3f} (n={m['n']}, {m['labels']})")
        log(f"eval accuracy {metrics['eval']['accuracy']} on {len(evaluation)} examples")
        for name, m in metrics["eval"]["per_label"].items():
            log(
                f"  {name:>20}: precision {m['precision']:.3f} recall {m['recall']:.3f}"
                f" (n={m['support']})"
            )
    card = card | {
        "encoder": encoder.model_id,
        "encoder_int8": args.quantize_int8,
        "max_length": encoder.max_length,
        "metrics": card.get("metrics", {}) | metrics,
        "training": report | {"data": Path(args.data).name, "n_examples": len(train)},
    }
    out = save_head(head, args.out, card)
    log(
        f"saved {out} (validation accuracy {report['val_accuracy']}, "
        f"best epoch {report['best_epoch']}/{report['epochs_run']}, {report['seconds']} s)"
    )
    return 0


def add_adapter_option(parser: argparse.ArgumentParser) -> None:
    """`--adapter`: the value `Encoder.load` takes (`none` becomes None)."""
    parser.add_argument(
        "--adapter",
        default="bundled",
        type=lambda value: None if value == "none" else value,
        help="adapter merged into the encoder: bundled (the shipped one, bundled encoder "
        "only), a directory, or none",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m classifiers.training ...` (same as `semantic-router train`)."""
    parser = argparse.ArgumentParser(
        prog="semantic-router train", description=__doc__.split("\n")[0]
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
