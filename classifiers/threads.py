"""How many workers a batching queue runs, and the intra-op threads they share (CPU only).

Constraints: torch's intra-op thread count is a per-OS-thread setting (OpenMP and MKL keep it
per thread), so each queue worker sets its own before each batch (`BatchQueue`'s `set_threads`).
The process's budget is read once, before any worker lowers its own: torch also keeps the last
value set as the default that threads started later begin with. On CUDA a queue has one worker
and never touches the CPU thread settings.

Tokenizing (Rust, GIL released) is the host's largest cost per long prompt once a GPU runs the
transformer: `tokenizer_parallelism` lets the fast tokenizer spread a batch's texts over the
cores (`TOKENIZERS_PARALLELISM`) when a queue is on CUDA and the host has cores to spare
(`PARALLEL_TOKENIZER_MIN_CORES`), and keeps it serial otherwise: on CPU the queue workers own
the cores, and on 2 cores its threads took CPU from the interpreter-bound work (PII, the event
loop): 341 instead of 421 decisions/s with the encoder's forward pass skipped
(`bench/gpu.py --host-only`). An operator's own setting of the variable wins.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

# More workers than this gains little on CPU (each batch gets fewer texts to amortise its
# per-op overhead) and costs a forward pass's activations per worker.
MAX_AUTO_WORKERS = 4

# A lone batch shorter than this (characters, summed over its texts; about 50 tokens) runs on
# one intra-op thread: measured in a queue worker thread on 2 cores, a 13-token text took 9.4 ms
# on one thread and 9.8 ms on two, a 63-token one 22.9 and 18.5 ms (bench/RESULTS.md).
PARALLEL_MIN_CHARS = 200

_budget: int | None = None


def cpu_thread_budget() -> int:
    """The process's intra-op thread count as it was before any queue worker changed it."""
    global _budget
    if _budget is None:
        _budget = max(1, torch.get_num_threads())
    return _budget


@dataclass(frozen=True)
class QueueThreads:
    """`BatchQueue`'s `workers`, `threads` and `set_threads` for one queue."""

    workers: int
    threads: int
    set_threads: Callable[[int], None] | None


def queue_threads(device: str, workers: int) -> QueueThreads:
    """Workers and thread budget of a queue on `device`; `workers` 0 = auto (one per thread of
    the budget, at most `MAX_AUTO_WORKERS`). A count above the budget is capped to it."""
    if torch.device(device).type != "cpu":
        return QueueThreads(1, 0, None)
    budget = cpu_thread_budget()
    chosen = min(budget, MAX_AUTO_WORKERS) if workers == 0 else min(workers, budget)
    return QueueThreads(chosen, budget, torch.set_num_threads)


TOKENIZERS_PARALLELISM = "TOKENIZERS_PARALLELISM"
PARALLEL_TOKENIZER_MIN_CORES = 8


def tokenizer_parallelism(
    device: str, env: dict[str, str] | None = None, cores: int | None = None
) -> bool:
    """Whether fast tokenizers tokenize a batch's texts in parallel, deciding it for the
    process when the operator has not: on for a CUDA queue on a host of at least
    `PARALLEL_TOKENIZER_MIN_CORES` cores, off otherwise. The tokenizers library reads the
    variable on every batch call, so setting it here takes effect at once."""
    environ = os.environ if env is None else env
    chosen = environ.get(TOKENIZERS_PARALLELISM)
    if chosen is None:
        spare = (os.cpu_count() or 1) if cores is None else cores
        parallel = torch.device(device).type != "cpu" and spare >= PARALLEL_TOKENIZER_MIN_CORES
        chosen = "true" if parallel else "false"
        environ[TOKENIZERS_PARALLELISM] = chosen
    return chosen.strip().lower() not in ("", "0", "f", "false", "n", "no", "off")
