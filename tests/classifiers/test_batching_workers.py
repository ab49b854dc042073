"""Several workers on one queue sharing a CPU thread budget: a lone batch gets every thread,
batches under load run side by side on one share each, the budget is never oversubscribed."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from classifiers import BatchingSettings
from classifiers.batching import BatchQueue, StageReporter


class Recorder:
    """A batch function that records the threads each batch was given and how many threads
    were held by batches running at the same moment."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.local = threading.local()
        self.lock = threading.Lock()
        self.in_use = 0
        self.peak_in_use = 0
        self.running = 0
        self.peak_running = 0
        self.given: list[tuple[int, int]] = []  # (batch size, threads)
        self.workers: set[str] = set()

    def set_threads(self, n: int) -> None:
        self.local.threads = n

    def __call__(self, items: list[int], report: StageReporter) -> Sequence[int]:
        threads = getattr(self.local, "threads", 0)
        with self.lock:
            self.in_use += threads
            self.running += 1
            self.peak_in_use = max(self.peak_in_use, self.in_use)
            self.peak_running = max(self.peak_running, self.running)
            self.given.append((len(items), threads))
            self.workers.add(threading.current_thread().name)
        time.sleep(self.delay)
        with self.lock:
            self.in_use -= threads
            self.running -= 1
        return [x + 1 for x in items]


def queue_of(recorder: Recorder, workers: int = 2, threads: int = 2,
             **settings: float) -> BatchQueue[int, int]:
    return BatchQueue(
        "test", recorder, BatchingSettings(**settings),  # type: ignore[arg-type]
        workers=workers, threads=threads, set_threads=recorder.set_threads,
    )


async def submit_all(queue: BatchQueue[int, int], count: int) -> None:
    """Start `queue`, submit 0..count-1 at once, check every result, close it."""
    await queue.start()
    try:
        results = await asyncio.gather(*(queue.submit(x) for x in range(count)))
    finally:
        await queue.close()
    assert results == [x + 1 for x in range(count)]


async def test_lone_requests_get_every_thread() -> None:
    recorder = Recorder(0.001)
    queue = queue_of(recorder, workers=2, threads=2)
    await queue.start()
    try:
        for x in range(5):
            assert await queue.submit(x) == x + 1
            await asyncio.sleep(0.005)  # the worker hands its threads back after delivering
    finally:
        await queue.close()
    assert recorder.given == [(1, 2)] * 5


async def test_under_load_batches_run_side_by_side_within_the_budget() -> None:
    recorder = Recorder(0.02)
    queue = queue_of(recorder, workers=2, threads=2, max_batch_size=4, max_wait_ms=1.0)
    await submit_all(queue, 64)
    assert sum(size for size, _ in recorder.given) == 64
    assert recorder.peak_running == 2  # two batches at once ...
    assert recorder.peak_in_use <= 2  # ... never more threads than the budget
    assert len(recorder.workers) == 2
    assert (4, 1) in recorder.given  # a full batch under load got one share


async def test_a_full_thread_batch_holds_back_the_other_worker() -> None:
    """While a lone batch runs on every thread, a new request waits for it rather than
    oversubscribing the cores; it then runs at once."""
    recorder = Recorder(0.05)
    queue = queue_of(recorder, workers=2, threads=2)
    await queue.start()
    try:
        first = asyncio.ensure_future(queue.submit(1))
        await asyncio.sleep(0.01)  # the first batch is running with both threads
        second = await queue.submit(2)
        assert await first == 2 and second == 3
    finally:
        await queue.close()
    assert recorder.given[0] == (1, 2)
    assert recorder.peak_in_use <= 2 and recorder.peak_running == 1


async def test_four_workers_share_eight_threads_two_each() -> None:
    recorder = Recorder(0.02)
    queue = queue_of(recorder, workers=4, threads=8, max_batch_size=2, max_wait_ms=1.0)
    await submit_all(queue, 40)
    assert recorder.peak_in_use <= 8
    assert recorder.peak_running >= 3
    assert {threads for _, threads in recorder.given} <= {2, 8}


async def test_without_a_budget_one_worker_never_sets_threads() -> None:
    recorder = Recorder(0.0)
    queue: BatchQueue[int, int] = BatchQueue("test", recorder, BatchingSettings())
    await queue.start()
    try:
        assert await queue.submit(1) == 2
    finally:
        await queue.close()
    assert recorder.given == [(1, 0)]


async def test_close_stops_every_worker() -> None:
    recorder = Recorder(0.0)
    queue = queue_of(recorder, workers=2, threads=2)
    await queue.start()
    names = {t.name for t in threading.enumerate() if t.name.startswith("classifier-test-")}
    assert names == {"classifier-test-0", "classifier-test-1"}
    await queue.close()
    alive = [t for t in threading.enumerate() if t.name.startswith("classifier-test-")]
    assert alive == []


@pytest.mark.parametrize(("workers", "threads", "with_setter"), [
    (0, 2, True), (2, 1, True), (2, 2, False), (1, -1, True),
])
def test_inconsistent_worker_settings_are_refused(
    workers: int, threads: int, with_setter: bool
) -> None:
    recorder = Recorder(0.0)
    with pytest.raises(ValueError):
        BatchQueue("test", recorder, BatchingSettings(), workers=workers, threads=threads,
                   set_threads=recorder.set_threads if with_setter else None)


async def test_a_burst_is_split_between_idle_workers() -> None:
    """Eight requests arriving together while both workers are idle run as two batches of
    four side by side on one thread each, not one batch of eight on both threads while the
    other worker waits for them."""
    recorder = Recorder(0.05)
    queue = queue_of(recorder, workers=2, threads=2, max_wait_ms=5.0)
    await submit_all(queue, 8)
    assert sorted(recorder.given) == [(4, 1), (4, 1)]
    assert recorder.peak_running == 2 and recorder.peak_in_use == 2


class SlowForLarge(Recorder):
    """A batch holding an item >= 100 runs six times longer."""

    def __call__(self, items: list[int], report: StageReporter) -> Sequence[int]:
        self.delay = 0.3 if max(items) >= 100 else 0.05
        return super().__call__(items, report)


async def test_a_burst_goes_whole_to_the_one_idle_worker() -> None:
    """With the other worker busy, the idle one takes the whole burst on its one share, and
    after a lone batch the waiting ones are split again."""
    recorder = SlowForLarge(0.0)
    queue = queue_of(recorder, workers=2, threads=2, max_wait_ms=5.0)
    await queue.start()
    try:
        pair = asyncio.gather(queue.submit(0), queue.submit(100))
        await asyncio.sleep(0.02)  # [0] and [100] run side by side
        burst = await asyncio.gather(*(queue.submit(x) for x in range(1, 7)))
        assert await pair == [1, 101] and burst == [x + 1 for x in range(1, 7)]
    finally:
        await queue.close()
    assert sorted(recorder.given[:2]) == [(1, 1), (1, 1)]
    assert recorder.given[2:] == [(6, 1)]  # [100] was still running: no second share free
    assert recorder.peak_in_use <= 2


async def test_after_a_lone_batch_the_waiting_ones_are_split() -> None:
    recorder = Recorder(0.05)
    queue = queue_of(recorder, workers=2, threads=2, max_wait_ms=5.0)
    await queue.start()
    try:
        first = asyncio.ensure_future(queue.submit(0))
        await asyncio.sleep(0.01)  # a lone batch holds both threads
        rest = await asyncio.gather(*(queue.submit(x) for x in range(1, 7)))
        assert await first == 1 and rest == [x + 1 for x in range(1, 7)]
    finally:
        await queue.close()
    assert recorder.given[0] == (1, 2)
    assert sorted(recorder.given[1:]) == [(3, 1), (3, 1)]
    assert recorder.peak_in_use <= 2


class Started(Recorder):
    """Also records when each batch started (perf_counter seconds) and its size."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay)
        self.starts: list[tuple[float, int]] = []

    def __call__(self, items: list[int], report: StageReporter) -> Sequence[int]:
        with self.lock:
            self.starts.append((time.perf_counter(), len(items)))
        return super().__call__(items, report)


async def test_items_left_by_a_split_start_at_once() -> None:
    """The workers that take what a split left do not open a new collection window (here
    50 ms) for it: every part starts together."""
    recorder = Started(0.05)
    queue = queue_of(recorder, workers=4, threads=8, max_batch_size=8, max_wait_ms=50.0)
    await submit_all(queue, 8)
    assert sorted(size for _, size in recorder.starts) == [2, 2, 2, 2]
    times = [at for at, _ in recorder.starts]
    assert max(times) - min(times) < 0.025  # not the 50 ms window again
    assert recorder.peak_in_use <= 8


async def test_a_backlog_is_shared_in_full_batches() -> None:
    """Sixty-four waiting items and four idle workers with batches of four: each worker's first
    batch is a full one, not a quarter of one batch."""
    recorder = Recorder(0.02)
    queue = queue_of(recorder, workers=4, threads=8, max_batch_size=4, max_wait_ms=1.0)
    await submit_all(queue, 64)
    assert [size for size, _ in recorder.given] == [4] * 16
    assert recorder.peak_in_use <= 8


async def test_a_small_lone_batch_runs_on_one_thread_and_leaves_the_rest() -> None:
    """With `size_of`, a lone batch below `parallel_size` gets one thread; one at or above it
    gets every thread; a request arriving while the small one runs starts beside it."""
    recorder = Recorder(0.05)
    queue = BatchQueue(
        "test", recorder, BatchingSettings(), workers=2, threads=2,
        set_threads=recorder.set_threads, size_of=lambda x: x, parallel_size=100,
    )
    await queue.start()
    try:
        assert await queue.submit(5) == 6
        await asyncio.sleep(0.01)  # the worker hands its thread back after delivering
        assert await queue.submit(500) == 501
        first = asyncio.ensure_future(queue.submit(7))
        await asyncio.sleep(0.01)  # the small batch runs on one thread
        assert await queue.submit(8) == 9 and await first == 8
    finally:
        await queue.close()
    assert recorder.given[:2] == [(1, 1), (1, 2)]
    assert recorder.given[2:] == [(1, 1), (1, 1)] and recorder.peak_running == 2


def test_queue_items_are_sized_by_their_text() -> None:
    from classifiers.queues import text_length
    from classifiers.runners import EncoderRequest

    assert text_length("hello") == 5
    assert text_length(EncoderRequest("hello there", frozenset({"domain"}))) == 11
