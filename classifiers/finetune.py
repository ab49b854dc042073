"""Fine-tune the shared encoder with a LoRA adapter on several labelled tasks at once.

Constraints: a build-time training step (`python -m classifiers.finetune`), never run by the
router. Every task (e.g. domain and jailbreak) gets a throw-away linear head on the same pooled,
L2-normalized embedding the router uses, so one adapter serves every head and the router still makes
one encoder pass per request. A distillation term keeps the adapted embedding close to the base
encoder's (cosine), so `embedding` signals written against the base encoder keep working. The
heads that ship are retrained afterwards on the adapted encoder with `classifiers.training`.
Validation holds out whole groups per task; the adapter of the best epoch (mean validation
accuracy over tasks) is saved. With `--student-layers` it trains a layer-reduced student
(`classifiers.student`) instead: the encoder with the `--teacher` adapter merged, cut to those
layers, every parameter of them trained, pulled towards the teacher's cached embeddings.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from classifiers.adapter import (
    DEFAULT_TARGETS,
    LoRALinear,
    add_lora,
    merge_adapter,
    read_adapter_config,
    save_adapter,
    set_lora_enabled,
)
from classifiers.encoder import BUNDLED_MODEL_ID, bundled_encoder_dir, mean_pool
from classifiers.student import apply_student, keep_layers, layer_parameters, save_student
from classifiers.training import Example, TrainConfig, read_jsonl, split_groups
from classifiers.windowing import load_tokenizer


@dataclass(frozen=True)
class Task:
    """One labelled training file and its throw-away head."""

    name: str
    labels: tuple[str, ...]
    train: tuple[Example, ...]
    val: tuple[Example, ...]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_task(name: str, path: str, val_fraction: float, limit: int, seed: int) -> Task:
    """Read `path`, optionally subsample to `limit` rows, hold out whole groups for validation."""
    rows = read_jsonl(path)
    if limit and len(rows) > limit:
        rows = random.Random(seed).sample(rows, limit)
    labels = tuple(sorted({r.label for r in rows}))
    y = np.array([labels.index(r.label) for r in rows])
    train_idx, val_idx = split_groups(y, [r.group for r in rows], val_fraction, seed)
    return Task(
        name, labels, tuple(rows[i] for i in train_idx), tuple(rows[i] for i in val_idx)
    )


class MultiTask:
    """The adapted encoder (LoRA) or a layer-reduced student, plus one linear head per task.

    Student mode (`student_layers`): the base encoder gets the `teacher` adapter merged, is cut
    to `student_layers` and every parameter of those layers is trained; the distillation
    target is then the teacher's embedding of each text (`teacher_embeddings`), not the base's.
    """

    def __init__(
        self, source: str, tasks: Sequence[Task], rank: int, alpha: float,
        targets: tuple[str, ...] = DEFAULT_TARGETS, *,
        student_layers: Sequence[int] = (), teacher: Path | None = None,
        init: Path | None = None,
    ) -> None:
        from transformers import AutoModel

        self.tokenizer = load_tokenizer(source)
        self.model = AutoModel.from_pretrained(source)
        self.lora: dict[str, LoRALinear] = {}
        self.student: list[torch.nn.Parameter] = []
        self.teacher_embeddings: dict[str, torch.Tensor] = {}
        if student_layers:
            if teacher is not None:
                merge_adapter(self.model, teacher, BUNDLED_MODEL_ID)
            if init is not None:  # continue training an earlier student (cuts the layers too)
                apply_student(self.model, init, read_adapter_config(init))
            else:
                keep_layers(self.model, student_layers)
            for param in self.model.parameters():
                param.requires_grad_(False)
            self.student = list(layer_parameters(self.model).values())
            for param in self.student:
                param.requires_grad_(True)
        else:
            self.lora = add_lora(self.model, rank, alpha, targets)
        dim = int(self.model.config.hidden_size)
        # Embeddings are unit vectors: a learnable temperature lets the heads reach sharp logits.
        self.heads = torch.nn.ModuleDict(
            {t.name: torch.nn.Linear(dim, len(t.labels)) for t in tasks}
        )
        self.temperature = torch.nn.Parameter(torch.tensor(10.0))

    def parameters(self) -> list[torch.nn.Parameter]:
        lora = [p for w in self.lora.values() for p in (w.lora_a, w.lora_b)]
        return lora + self.student + list(self.heads.parameters()) + [self.temperature]

    def embed(self, texts: Sequence[str], max_length: int) -> tuple[torch.Tensor, Any]:
        enc = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        return mean_pool(self.model(**enc).last_hidden_state, enc["attention_mask"]), enc

    def distill_target(self, texts: Sequence[str], enc: Any) -> torch.Tensor:
        """What the embedding is pulled towards: the teacher's (student) or the base's (LoRA)."""
        if self.student:
            return torch.stack([self.teacher_embeddings[t] for t in texts])
        set_lora_enabled(self.lora, False)
        try:
            with torch.no_grad():
                return mean_pool(self.model(**enc).last_hidden_state, enc["attention_mask"])
        finally:
            set_lora_enabled(self.lora, True)

    def logits(self, task: str, emb: torch.Tensor) -> torch.Tensor:
        return self.heads[task](emb * self.temperature)

    def save(self, out: Path, config: dict[str, Any], layers: Sequence[int]) -> None:
        if self.student:
            save_student(self.model, layers, out, config)
        else:
            save_adapter(self.lora, out, config)


def teacher_embeddings(
    tasks: Sequence[Task], teacher: Path, max_length: int, cache: Path | None
) -> tuple[str, dict[str, torch.Tensor]]:
    """The teacher encoder's id and its embedding of every training and validation text
    (cached)."""
    from classifiers.encoder import Encoder
    from classifiers.training import cached_embed, embed_with_encoder

    encoder = Encoder.load(max_length=max_length, adapter=str(teacher))
    texts = sorted({r.text for t in tasks for r in (*t.train, *t.val)})
    key = f"{encoder.model_id}|{encoder.max_length}|mean|l2"
    vectors = cached_embed(embed_with_encoder(encoder, label="teacher"), texts, cache, key)
    return encoder.model_id, dict(zip(texts, torch.from_numpy(vectors), strict=True))


def _batches(task: Task, batch_size: int, rng: random.Random) -> list[tuple[str, list[Example]]]:
    """Length-bucketed shuffled batches: sort within chunks of 50 batches to cut padding."""
    rows = list(task.train)
    rng.shuffle(rows)
    out: list[tuple[str, list[Example]]] = []
    chunk = batch_size * 50
    for start in range(0, len(rows), chunk):
        part = sorted(rows[start : start + chunk], key=lambda r: len(r.text))
        out += [
            (task.name, part[i : i + batch_size]) for i in range(0, len(part), batch_size)
        ]
    return out


def validate(net: MultiTask, task: Task, max_length: int) -> float:
    """Accuracy of the task's throw-away head on its held-out groups."""
    net.model.eval()
    correct = 0
    rows = sorted(task.val, key=lambda r: len(r.text))
    with torch.inference_mode():
        for start in range(0, len(rows), 64):
            part = rows[start : start + 64]
            emb, _ = net.embed([r.text for r in part], max_length)
            pred = net.logits(task.name, emb).argmax(1).tolist()
            correct += sum(task.labels[p] == r.label for p, r in zip(pred, part, strict=True))
    net.model.train()
    return correct / max(len(rows), 1)


def train(args: argparse.Namespace) -> int:
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tasks = [
        load_task(name, path, args.val_fraction, limit, args.seed)
        for name, path, limit in map(_task_spec, args.task)
    ]
    for task in tasks:
        _log(f"task {task.name}: {len(task.train)} train, {len(task.val)} val, {task.labels}")
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    layers = [int(i) for i in args.student_layers.split(",") if i.strip()]
    if layers and args.teacher is None:
        raise SystemExit("--student-layers needs --teacher (the adapter to distil)")
    net = MultiTask(str(bundled_encoder_dir()), tasks, args.rank, args.alpha, targets,
                    student_layers=layers, teacher=args.teacher, init=args.init)
    teacher_id = ""
    if layers:
        teacher_id, net.teacher_embeddings = teacher_embeddings(
            tasks, args.teacher, args.max_length, args.cache_dir)
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.01)
    by_name = {t.name: t for t in tasks}
    best = (-1.0, 0)
    history: list[dict[str, Any]] = []
    started = time.monotonic()
    for epoch in range(1, args.epochs + 1):
        batches = [b for t in tasks for b in _batches(t, args.batch_size, rng)]
        rng.shuffle(batches)
        total = len(batches)
        lr_at = [args.lr * min(1.0, (i + 1) / 50) * (1 - i / total) for i in range(total)]
        for step, (name, rows) in enumerate(batches):
            for group in optimizer.param_groups:
                group["lr"] = lr_at[step]
            emb, enc = net.embed([r.text for r in rows], args.max_length)
            target = torch.tensor([by_name[name].labels.index(r.label) for r in rows])
            loss = torch.nn.functional.cross_entropy(
                net.logits(name, emb), target, label_smoothing=0.05
            )
            if args.distill > 0:
                cos = (emb * net.distill_target([r.text for r in rows], enc)).sum(1)
                loss = loss + args.distill * (1 - cos).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step % 20 == 0:
                _log(
                    f"epoch {epoch} step {step}/{total} {name} loss {loss.item():.3f} "
                    f"({time.monotonic() - started:.0f} s)"
                )
        scores = {t.name: round(validate(net, t, args.max_length), 4) for t in tasks}
        mean = float(np.mean(list(scores.values())))
        history.append({"epoch": epoch, "val_accuracy": scores})
        _log(f"epoch {epoch}: validation {scores}")
        if mean > best[0]:
            best = (mean, epoch)
            shape: dict[str, Any] = (
                {"teacher": teacher_id} if layers
                else {"rank": args.rank, "alpha": args.alpha}
            )
            net.save(
                args.out,
                shape | {
                    "name": args.name,
                    "base": BUNDLED_MODEL_ID,
                    "tasks": {t.name: list(t.labels) for t in tasks},
                    "training": {
                        "epochs": args.epochs,
                        "best_epoch": epoch,
                        "history": history,
                        "lr": args.lr,
                        "batch_size": args.batch_size,
                        "max_length": args.max_length,
                        "distill": args.distill,
                        "seconds": round(time.monotonic() - started),
                    },
                },
                layers,
            )
            _log(f"saved adapter to {args.out}")
    return 0


def _task_spec(spec: str) -> tuple[str, str, int]:
    """`NAME=FILE[:LIMIT]` -> (name, file, limit; 0 = every row)."""
    name, _, tail = spec.partition("=")
    path, _, limit = tail.partition(":")
    return name, path, int(limit) if limit else 0


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m classifiers.finetune`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--task",
        action="append",
        required=True,
        help="NAME=train.jsonl[:LIMIT] (repeat per task; LIMIT subsamples rows)",
    )
    parser.add_argument("--out", type=Path, required=True, help="adapter directory")
    parser.add_argument("--name", default="sr-lora", help="adapter name (heads record it)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help="Linear layers to adapt (module name suffixes, comma-separated)",
    )
    parser.add_argument("--distill", type=float, default=1.0, help="weight of the cosine term")
    parser.add_argument(
        "--student-layers", default="",
        help="train a layer-reduced student from these base layers (e.g. 0,2,4) instead of "
        "a LoRA adapter; needs --teacher",
    )
    parser.add_argument("--teacher", type=Path, help="adapter directory the student imitates")
    parser.add_argument("--init", type=Path, help="student directory to continue training from")
    parser.add_argument("--cache-dir", type=Path, help="embedding cache for teacher vectors")
    # The same split as classifiers.training by default: with the same data and seed, the rows a
    # head (and its lexical mix) is judged on were never seen by the encoder either.
    parser.add_argument("--val-fraction", type=float, default=TrainConfig.val_fraction)
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return train(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
