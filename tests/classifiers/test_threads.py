"""Queue workers and their CPU thread budget: auto, explicit, capped, and none on CUDA."""

from __future__ import annotations

import threading

import pytest
import torch

from classifiers.threads import (
    MAX_AUTO_WORKERS,
    TOKENIZERS_PARALLELISM,
    cpu_thread_budget,
    queue_threads,
    tokenizer_parallelism,
)


def test_cuda_queues_have_one_worker_and_leave_cpu_threads_alone() -> None:
    plan = queue_threads("cuda:0", 0)
    assert (plan.workers, plan.threads, plan.set_threads) == (1, 0, None)


@pytest.mark.parametrize("asked", [0, 1, 2, 3, 64])
def test_cpu_workers_auto_explicit_and_capped_by_the_budget(asked: int) -> None:
    budget = cpu_thread_budget()
    plan = queue_threads("cpu", asked)
    expected = min(budget, MAX_AUTO_WORKERS) if asked == 0 else min(asked, budget)
    assert (plan.workers, plan.threads) == (expected, budget)
    assert plan.set_threads is torch.set_num_threads


def test_the_budget_is_read_before_workers_lower_their_own() -> None:
    budget = cpu_thread_budget()

    def worker() -> None:
        torch.set_num_threads(1)  # what a queue worker does for a batch under load

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    try:
        assert cpu_thread_budget() == budget
    finally:
        torch.set_num_threads(budget)


def test_a_workers_thread_count_is_its_own() -> None:
    """What the budget relies on: torch's intra-op thread count is per OS thread."""
    budget = cpu_thread_budget()
    seen: list[int] = []

    def worker() -> None:
        torch.set_num_threads(1)
        seen.append(torch.get_num_threads())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    try:
        assert seen == [1]
        assert torch.get_num_threads() == budget  # this thread kept its own
    finally:
        torch.set_num_threads(budget)  # the default for threads started later


@pytest.mark.parametrize(("device", "cores", "parallel"), [
    ("cpu", 64, False), ("cuda", 16, True), ("cuda:1", 8, True), ("cuda", 2, False)])
def test_tokenizer_parallelism_is_decided_by_device_and_cores_when_unset(
    device: str, cores: int, parallel: bool
) -> None:
    env: dict[str, str] = {}
    assert tokenizer_parallelism(device, env, cores) is parallel
    assert env == {TOKENIZERS_PARALLELISM: "true" if parallel else "false"}  # for the library


@pytest.mark.parametrize(("value", "parallel"), [("true", True), ("1", True), ("false", False),
                                                 ("OFF", False), ("", False)])
def test_an_operators_tokenizer_parallelism_wins(value: str, parallel: bool) -> None:
    for device in ("cpu", "cuda"):
        env = {TOKENIZERS_PARALLELISM: value}
        assert tokenizer_parallelism(device, env, 16) is parallel
        assert env == {TOKENIZERS_PARALLELISM: value}
