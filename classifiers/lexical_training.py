"""Fit the lexical companion of a trained domain head and choose its mix on held-out rows.

`python -m classifiers.lexical_training --data train.jsonl --head DIR [--eval test.jsonl ...]`
is a build step run after `classifiers.training` wrote `DIR`, on the same data. It reproduces the
head's own group split (its recorded `val_fraction` and `seed`), fits the TF-IDF model on the
head's training side, picks `mix` by accuracy of the mixed prediction on the held-out side (rows
neither model was fitted on; `--mix` sets it instead, for an encoder that was itself trained on
those rows, such as a distilled student, where the head looks better there than it is), refits
the lexical model on every row and writes it into `DIR`
(see `classifiers.lexical`). Each `--eval` file is reported for the head alone, the lexical model
alone and the mix, and recorded in `lexical.json`.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from classifiers.heads import load_head, read_head_config
from classifiers.lexical import LexicalModel, mix_probs, save_lexical, tokens
from classifiers.training import (
    Example,
    add_adapter_option,
    cached_embed,
    embed_with_encoder,
    label_ids,
    read_jsonl,
    split_groups,
)

MIX_GRID = tuple(round(0.05 * i, 2) for i in range(21))
CARD_HEADING = "## Lexical companion"


def build_vocab(docs: Sequence[list[str]], min_df: int, max_features: int) -> list[str]:
    """Features in at least `min_df` texts, the `max_features` most frequent (ties by name)."""
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(set(doc))
    kept = sorted((f for f, n in df.items() if n >= min_df), key=lambda f: (-df[f], f))
    return kept[:max_features]


def idf_of(docs: Sequence[list[str]], vocab: Sequence[str]) -> torch.Tensor:
    """Smoothed idf `ln((1 + N) / (1 + df)) + 1` per vocabulary feature."""
    index = {f: i for i, f in enumerate(vocab)}
    df = np.zeros(len(vocab))
    for doc in docs:
        for i in {index[t] for t in doc if t in index}:
            df[i] += 1
    return torch.tensor(np.log((1 + len(docs)) / (1 + df)) + 1, dtype=torch.float32)


def fit_lexical(
    texts: Sequence[str], y: np.ndarray, labels: Sequence[str], *, min_df: int = 2,
    max_features: int = 100_000, epochs: int = 30, lr: float = 5e-3, seed: int = 0,
) -> LexicalModel:
    """Vocabulary, idf and a linear layer (AdamW, cross-entropy) on `texts`; mix left at 0."""
    docs = [tokens(t) for t in texts]
    vocab = build_vocab(docs, min_df, max_features)
    dim = len(labels)
    model = LexicalModel(vocab, idf_of(docs, vocab), torch.zeros(len(vocab), dim),
                         torch.zeros(dim), labels, 0.0)
    feats = [model.features(t) for t in texts]
    bag = torch.nn.EmbeddingBag(len(vocab), dim, mode="sum")
    torch.nn.init.zeros_(bag.weight)
    bias = torch.nn.Parameter(torch.zeros(dim))
    opt = torch.optim.AdamW([bag.weight, bias], lr=lr, weight_decay=1e-4)
    target = torch.tensor(y, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for batch in torch.randperm(len(texts), generator=generator).split(128):
            rows, values, offsets = _packed([feats[int(i)] for i in batch])
            logits = bag(rows, offsets, per_sample_weights=values) + bias
            loss = torch.nn.functional.cross_entropy(logits, target[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return LexicalModel(vocab, model.idf, bag.weight.detach(), bias.detach(), labels, 0.0)


def _packed(
    feats: Sequence[tuple[np.ndarray, np.ndarray]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One `EmbeddingBag` input: concatenated rows and values, and each text's offset."""
    lengths = [len(rows) for rows, _ in feats]
    offsets = torch.tensor([0, *np.cumsum(lengths)[:-1].tolist()], dtype=torch.long)
    rows = torch.from_numpy(np.concatenate([r for r, _ in feats]))
    return rows, torch.from_numpy(np.concatenate([v for _, v in feats])), offsets


def lexical_log_probs(model: LexicalModel, texts: Sequence[str]) -> torch.Tensor:
    return torch.stack([model.log_probs(t) for t in texts])


def best_mix(head_probs: torch.Tensor, lexical: torch.Tensor, y: np.ndarray) -> tuple[float, float]:
    """(mix, accuracy) with the best held-out accuracy; the smaller mix wins a tie."""
    accuracy, neg_mix = max((_accuracy(mix_probs(head_probs, lexical, m), y), -m)
                            for m in MIX_GRID)
    return -neg_mix, accuracy


def _accuracy(scores: torch.Tensor, y: np.ndarray) -> float:
    """Share of rows whose highest score is their label (probabilities or log-probabilities)."""
    return float((scores.argmax(1) == torch.from_numpy(np.asarray(y))).float().mean())


def write_card_section(head_dir: Path, model: LexicalModel, metrics: dict[str, Any]) -> None:
    """Replace the `## Lexical companion` section at the end of the head's README.md."""
    card = head_dir / "README.md"
    text = card.read_text().split(CARD_HEADING)[0].rstrip() if card.is_file() else ""
    lines = [
        CARD_HEADING, "",
        f"`lexical.safetensors` + `lexical.json`: {len(model.index):,} word and word-pair "
        "TF-IDF features into a linear layer (`classifiers/lexical.py`), fitted by "
        "`python -m classifiers.lexical_training` on the same rows as the head. The domain "
        f"signal reports `(1 - {model.mix}) * p_head + {model.mix} * p_lexical`; "
        + ("the mix was set by `--mix` (the encoder was trained on the head's held-out rows); "
           f"accuracy there {metrics['held_out_accuracy']:.4f}."
           if metrics.get("mix_set") else
           f"the mix had the best accuracy ({metrics['held_out_accuracy']:.4f}) on the head's "
           "own held-out train rows."), "",
        "| eval file | n | head alone | lexical alone | mixed |", "|---|---|---|---|---|",
    ]
    for name, m in metrics["eval"].items():
        lines.append(f"| {name} | {m['n']} | {m['head']:.4f} | {m['lexical']:.4f} | "
                     f"{m['mixed']:.4f} |")
    card.write_text(text + "\n\n" + "\n".join(lines) + "\n")


def run(args: argparse.Namespace) -> int:
    from classifiers.encoder import Encoder  # deferred: loading transformers is slow

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    config = read_head_config(args.head)
    head = load_head(args.head)
    labels = list(head.labels)
    train = read_jsonl(args.data)
    y = label_ids(train, labels, args.data)
    training = config.get("training", {}).get("config", {})
    fraction, seed = float(training.get("val_fraction", 0.1)), int(training.get("seed", 0))
    fit_idx, val_idx = split_groups(y, [e.group for e in train], fraction, seed)
    if len(val_idx) == 0:
        log("error: the head was trained without a held-out split; cannot choose the mix")
        return 2
    encoder = Encoder.load(max_length=int(config["max_length"]), adapter=args.adapter)
    if encoder.model_id != config["encoder"]:
        log(f"error: head {args.head} was trained on {config['encoder']}, not {encoder.model_id}")
        return 2
    key = f"{encoder.model_id}|{encoder.max_length}|mean|l2"
    cache = Path(args.cache_dir) if args.cache_dir else None

    def head_probs(examples: Sequence[Example], label: str) -> torch.Tensor:
        x = cached_embed(embed_with_encoder(encoder, label=label), [e.text for e in examples],
                         cache, key)
        return head.predict_proba(torch.from_numpy(x))

    texts = [e.text for e in train]
    options: dict[str, Any] = {"min_df": args.min_df, "max_features": args.max_features,
                               "epochs": args.epochs, "seed": args.seed}
    held = fit_lexical([texts[i] for i in fit_idx], y[fit_idx], labels, **options)
    val = [train[i] for i in val_idx]
    val_probs = head_probs(val, "embed held-out")
    val_lexical = lexical_log_probs(held, [e.text for e in val])
    if args.mix is None:
        mix, val_accuracy = best_mix(val_probs, val_lexical, y[val_idx])
    else:
        mix = args.mix
        val_accuracy = _accuracy(mix_probs(val_probs, val_lexical, mix), y[val_idx])
    log(f"mix {mix}{'' if args.mix is None else ' (set)'}: held-out accuracy "
        f"{val_accuracy:.4f} on {len(val)} rows")
    model = fit_lexical(texts, y, labels, **options)
    model.mix = mix
    metrics: dict[str, Any] = {"held_out_accuracy": round(val_accuracy, 4), "n_train": len(train),
                               "training": options, "eval": {}, "mix_set": args.mix is not None}
    for path in args.eval or []:
        rows = read_jsonl(path)
        y_eval = label_ids(rows, labels, path)
        probs = head_probs(rows, f"embed {Path(path).name}")
        lexical = lexical_log_probs(model, [e.text for e in rows])
        report = {"n": len(rows), "head": round(_accuracy(probs, y_eval), 4),
                  "lexical": round(_accuracy(lexical, y_eval), 4),
                  "mixed": round(_accuracy(mix_probs(probs, lexical, mix), y_eval), 4)}
        metrics["eval"][Path(path).name] = report
        log(f"{path}: {report}")
    size = save_lexical(args.head, model, metrics)
    write_card_section(Path(args.head), model, metrics)
    log(f"saved lexical model into {args.head} ({len(model.index)} features, {size} bytes)")
    return 0


def _unit(value: str) -> float:
    mix = float(value)
    if not 0.0 <= mix <= 1.0:
        raise argparse.ArgumentTypeError("the mix is between 0 and 1")
    return mix


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="the JSONL the head was trained on")
    parser.add_argument("--head", required=True, help="head directory (written into)")
    parser.add_argument("--eval", action="append", help="labelled JSONL to report (repeatable)")
    parser.add_argument("--cache-dir", help="embedding cache shared with classifiers.training")
    parser.add_argument("--min-df", type=int, default=2)
    parser.add_argument("--max-features", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    add_adapter_option(parser)
    parser.add_argument("--mix", type=_unit, help="use this mix instead of choosing it on the "
                        "held-out rows (for an encoder trained on those rows)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
