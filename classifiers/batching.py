"""Asyncio-facing batching queue: callers await, one worker thread runs batched forward passes.

Constraints:
- The forward pass never runs on the event loop; a dedicated worker thread collects batches and
  delivers results with `loop.call_soon_threadsafe`.
- Bounded everywhere: at most `max_queue` waiting items (a full queue raises `Overloaded` at once),
  every call waits at most `timeout_ms` (`ClassifierTimeout`), shutdown joins with a timeout.
- A backlog the workers cannot clear in time sheds at once too: a call whose predicted wait (what
  the running batches have left, the items ahead of it and its own batch's, at the recent cost
  per item, shared by the workers) exceeds `SHED_FRACTION` of its timeout raises `Overloaded` on
  arrival instead of timing out later, so a burst beyond the host's rate is answered "busy,
  retry" in microseconds while the requests already queued are served in time; a call still
  queued at its timeout is an overload too (it never got a worker), not a classifier timeout.
  The cost per item is the batches' wall time (on a saturated host a worker gets a fraction of
  a core, and that is the rate it serves at), never less than a running batch has already
  taken per item: a batch running long (escalations, a starved CPU) raises the estimate at once.
- A worker takes no more items into a batch than it can finish, at that cost, before the
  earliest of their deadlines (at least one): the rest stay queued for the next free worker or
  time out there as an overload, instead of being started too late and ending past their
  timeout, routed without the classifier's answer (the first burst on a queue with no batch
  measured yet admits everything).
- A forward-pass error fails every caller of that batch with `ClassifierError`.
- `max_wait_ms` is only spent when the queue is under load (the previous batch held more than one
  item or a backlog was waiting); a lone request is dispatched at once, so batching costs idle
  traffic no latency.
- CPU thread budget (`threads` > 0 with `set_threads`): up to `workers` worker threads share
  `threads` intra-op threads. A batch taken while nothing else runs or waits gets every thread
  (a lone request is as fast as with one worker; unless `size_of` says it is too small for a
  second thread to pay, then one); under load each batch gets its share, so the
  workers run side by side on one thread each instead of one batch stalling every core on each
  op's barrier. Ready items are split between the idle workers, so a burst never runs as one
  every-thread batch while the others wait. A worker whose share is not free waits: the budget
  is never oversubscribed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from classifiers.api import BatchingSettings, ClassifierError, ClassifierTimeout, Overloaded

I = TypeVar("I")  # noqa: E741 - conventional short type-variable names
R = TypeVar("R")

TimingCallback = Callable[[str, str, float], None]
BatchCallback = Callable[[str, int], None]
StageReporter = Callable[[str, float], None]  # (stage, seconds), bound to one queue's name

_JOIN_TIMEOUT_S = 10.0
SHED_FRACTION = 0.75
"""A call is shed when its predicted wait exceeds this share of its timeout: the rest covers
the prediction's error and the call's own batch."""
WORKER_NICE = 5
"""How much lower than the process's the worker threads' CPU priority is (a nice value)."""
_COST_WEIGHT = 0.2  # weight of the newest batch in the running cost per item
_log = logging.getLogger(__name__)


@dataclass(eq=False)  # compared by identity: a timed-out caller finds its own entry
class _Entry(Generic[I, R]):
    item: I
    future: asyncio.Future[R]
    enqueued: float = field(default_factory=time.perf_counter)
    deadline: float = float("inf")  # perf_counter time its caller stops waiting


def _resolve(future: asyncio.Future[R], result: R) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[R], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _settle_all(
    action: Callable[[asyncio.Future[R], Any], None],
    outcomes: list[tuple[asyncio.Future[R], Any]],
) -> None:
    for future, value in outcomes:
        action(future, value)


def _yield_to_the_event_loop() -> None:
    """Lower this worker thread's CPU priority (Linux niceness is per thread) by WORKER_NICE:
    on a saturated CPU the event loop, which admits, sheds and answers requests, and a proxy
    sharing the host, run first, and the forward passes take every cycle they leave."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(),
                       os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICE)
    except (AttributeError, OSError):  # not Linux, or not permitted: run at the same priority
        _log.debug("classifier worker: thread priority unchanged", exc_info=True)


class BatchQueue(Generic[I, R]):
    """One bounded queue + worker thread around a batch function `process(items, report)`.

    `process` runs on the worker thread, must return one result per item, in order, and may call
    `report(stage, seconds)` for its own stages (tokenize, inference).
    """

    def __init__(
        self,
        name: str,
        process: Callable[[list[I], StageReporter], Sequence[R]],
        settings: BatchingSettings,
        *,
        on_timing: TimingCallback | None = None,
        on_batch: BatchCallback | None = None,
        workers: int = 1,
        threads: int = 0,
        set_threads: Callable[[int], None] | None = None,
        size_of: Callable[[I], int] | None = None,
        parallel_size: int = 0,
    ) -> None:
        if settings.max_batch_size < 1 or settings.max_queue < 1:
            raise ValueError("max_batch_size and max_queue must be >= 1")
        if workers < 1 or threads < 0:
            raise ValueError("workers must be >= 1 and threads >= 0")
        if workers > 1 and (threads < workers or set_threads is None):
            raise ValueError("several workers need a thread budget of at least one per worker")
        self.name = name
        self.settings = settings
        self._process = process
        self._on_timing = on_timing
        self._on_batch = on_batch
        self._pending: collections.deque[_Entry[I, R]] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self._busy = False  # whether the last batch showed concurrent demand
        self.workers = workers
        self._budget = threads if set_threads is not None else 0
        self._set_threads = set_threads
        self._free = self._budget  # intra-op threads not held by a running batch
        self._running = 0  # batches being collected or run
        self._collecting = False  # a worker is waiting for its batch to fill
        self._left_for_others = False  # the last take split ready items: take them at once
        self._size_of = size_of
        self._parallel_size = parallel_size
        self._item_seconds = 0.0  # running mean of a batch's wall time per item, one worker
        self._started: dict[int, tuple[float, int]] = {}  # worker -> (start, items) of its batch

    async def start(self) -> None:
        """Start the worker threads, bound to the running event loop."""
        if self._threads:
            return
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._run, name=f"classifier-{self.name}-{k}", daemon=True)
            for k in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    async def close(self) -> None:
        """Stop the workers, fail whatever is still queued, and join the threads (bounded)."""
        threads, self._threads = self._threads, []
        with self._cond:
            self._stopping = True
            leftover = list(self._pending)
            self._pending.clear()
            self._cond.notify_all()
        for entry in leftover:
            _fail(entry.future, ClassifierError(f"{self.name}: classifier shutting down"))
        deadline = time.monotonic() + _JOIN_TIMEOUT_S
        for thread in threads:
            await asyncio.to_thread(thread.join, max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                _log.warning(
                    "classifier worker %s did not stop within %ss", thread.name, _JOIN_TIMEOUT_S
                )

    def depth(self) -> int:
        """Items waiting (not yet picked by the worker)."""
        return len(self._pending)

    async def submit(self, item: I, timeout_s: float | None = None) -> R:
        """Enqueue `item` and await its result; raises Overloaded / ClassifierTimeout /
        ClassifierError. `timeout_s` defaults to the settings' `timeout_ms`."""
        loop = self._loop
        if loop is None or not self._threads:
            raise ClassifierError(f"{self.name}: batching queue not started")
        future: asyncio.Future[R] = loop.create_future()
        with self._cond:
            if self._stopping:
                raise ClassifierError(f"{self.name}: classifier shutting down")
            if len(self._pending) >= self.settings.max_queue:
                raise Overloaded(
                    f"{self.name}: queue full ({self.settings.max_queue} waiting requests)"
                )
            limit = self.settings.timeout_ms / 1000.0 if timeout_s is None else timeout_s
            now = time.perf_counter()
            ahead = len(self._pending)
            wait = self._predicted_wait(ahead, now)
            if wait > SHED_FRACTION * limit:
                raise Overloaded(f"{self.name}: {ahead} waiting requests would take "
                                 f"about {wait * 1000:.0f} ms (timeout {limit * 1000:.0f} ms)")
            entry = _Entry(item, future, now, now + limit)
            self._pending.append(entry)
            self._cond.notify_all()
        try:
            return await asyncio.wait_for(future, limit)
        except TimeoutError as err:
            # wait_for cancelled the future; a late result for a started entry is dropped by
            # _resolve. One still waiting never got a worker: the queue was too long, an
            # overload (the caller's `on_overload`), not a slow classifier.
            with self._cond:
                waiting = entry in self._pending
                if waiting:
                    self._pending.remove(entry)
            if waiting:
                raise Overloaded(f"{self.name}: still queued after {limit * 1000:.0f} ms") from err
            raise ClassifierTimeout(f"{self.name}: no result within {limit * 1000:.0f} ms") from err

    def _item_cost(self, now: float) -> float:
        """Seconds per item on one worker (lock held): the running mean of finished batches,
        but never less than a running batch has already taken per item."""
        cost = self._item_seconds
        for started, count in self._started.values():
            cost = max(cost, (now - started) / count)
        return cost

    def _predicted_wait(self, ahead: int, now: float) -> float:
        """Seconds until a call arriving now behind `ahead` waiting items has its result (lock
        held): what the running batches have left, the items ahead, then the caller's own
        batch, which the items behind it fill in a burst (a batch ends when its last item
        does), at `_item_cost`, shared by the workers."""
        cost = self._item_cost(now)
        if not cost:
            return 0.0
        own = min(self.settings.max_batch_size, ahead + 1)
        left = sum(max(0.0, count * cost - (now - started))
                   for started, count in self._started.values())
        return (left + (ahead + own) * cost) / self.workers

    def _fits(self, count: int, now: float) -> int:
        """How many of the first `count` waiting items (at least one) one worker can finish,
        at `_item_cost`, before the earliest of their deadlines (lock held)."""
        cost = self._item_cost(now)
        if not cost:
            return count
        earliest = float("inf")
        for k in range(count):
            earliest = min(earliest, self._pending[k].deadline)
            if k and now + (k + 1) * cost > earliest:
                return k
        return count

    def _take_batch(self) -> tuple[list[_Entry[I, R]], int] | None:
        """Block until a batch is ready (or shutdown: None): the batch and the intra-op threads
        it holds (0 without a budget), released by `_release`. One worker collects at a time.
        Called on a worker thread."""
        size = self.settings.max_batch_size
        with self._cond:
            while not self._stopping and (
                not self._pending or self._collecting or (self._budget and self._free < 1)
            ):
                self._cond.wait()
            if self._stopping:
                return None
            held = 1 if self._budget else 0
            self._free -= held
            self._running += 1
            busy = self._busy or len(self._pending) > 1
            if busy and len(self._pending) < size and not self._left_for_others:
                self._collecting = True
                deadline = self._pending[0].enqueued + self.settings.max_wait_ms / 1000.0
                remaining = deadline - time.perf_counter()
                while remaining > 0 and len(self._pending) < size and not self._stopping:
                    self._cond.wait(remaining)
                    remaining = deadline - time.perf_counter()
                self._collecting = False
            ready = min(size, len(self._pending))
            count = self._fits(self._portion(ready), time.perf_counter())
            self._left_for_others = count < ready
            batch = [self._pending.popleft() for _ in range(count)]
            self._busy = count > 1 or bool(self._pending)
            held += self._extra_threads(held, batch)
            if self._pending:
                self._cond.notify_all()  # the rest is another worker's next batch
        return [entry for entry in batch if not entry.future.cancelled()], held

    def _portion(self, count: int) -> int:
        """How many of ``count`` ready items (at most a batch) this worker takes (lock held):
        an equal part of the whole backlog when idle workers with a free share can take the
        rest side by side, else all of them. Split this way, a burst runs on one share per
        worker at once instead of on every thread in one call while the other worker waits for
        those threads; the workers that take the rest do not wait for it to fill."""
        if not self._budget or count < 2:
            return count
        share = max(1, self._budget // self.workers)
        helpers = min(self.workers - self._running, self._free // share)
        parts = min(count, 1 + max(0, helpers))
        return min(count, -(-len(self._pending) // parts))

    def _worth_parallel(self, batch: list[_Entry[I, R]]) -> bool:
        """Whether a batch is big enough (`size_of` summed, against `parallel_size`) for more
        intra-op threads to pay: a short text alone runs as fast on one (workers' OpenMP
        fork/join costs what the second thread saves) and leaves the other cores free."""
        if self._size_of is None:
            return True
        return sum(self._size_of(entry.item) for entry in batch) >= self._parallel_size

    def _extra_threads(self, held: int, batch: list[_Entry[I, R]]) -> int:
        """Threads added to a batch's one (lock held): every free one when this batch is alone
        (no other running, nothing waiting) and big enough to use them, else up to an equal
        share of the budget."""
        if not self._budget:
            return 0
        alone = self._running == 1 and not self._pending
        if alone and not self._worth_parallel(batch):
            return 0
        share = self._free + held if alone else max(1, self._budget // self.workers)
        extra = max(0, min(self._free, share - held))
        self._free -= extra
        return extra

    def _release(self, held: int) -> None:
        with self._cond:
            self._free += held
            self._running -= 1
            self._cond.notify_all()

    def _run(self) -> None:
        _yield_to_the_event_loop()
        while True:
            taken = self._take_batch()
            if taken is None:
                return
            batch, held = taken
            try:
                if batch:
                    if self._set_threads is not None and held:
                        self._set_threads(held)
                    self._run_batch(batch)
            finally:
                self._release(held)

    def _run_batch(self, batch: list[_Entry[I, R]]) -> None:
        picked = time.perf_counter()
        for entry in batch:
            self._report_timing("queue", picked - entry.enqueued)
        self._report_batch(len(batch))
        worker = threading.get_ident()
        with self._cond:
            self._started[worker] = (picked, len(batch))
        try:
            results = self._process([entry.item for entry in batch], self._report_timing)
            cost = (time.perf_counter() - picked) / len(batch)
            with self._cond:
                weight = _COST_WEIGHT if self._item_seconds else 1.0  # the first batch sets it
                self._item_seconds += weight * (cost - self._item_seconds)
                del self._started[worker]
            if len(results) != len(batch):
                raise ClassifierError(
                    f"{self.name}: batch function returned {len(results)} results "
                    f"for {len(batch)} inputs"
                )
        except Exception as err:  # every caller of this batch must learn of the failure
            with self._cond:
                self._started.pop(worker, None)
            _log.exception("classifier %s: batch of %d failed", self.name, len(batch))
            error = (
                err
                if isinstance(err, ClassifierError)
                else ClassifierError(
                    f"{self.name}: forward pass failed: {type(err).__name__}: {err}"
                )
            )
            if error is not err:
                error.__cause__ = err
            self._deliver(_fail, [(entry.future, error) for entry in batch])
            return
        self._deliver(
            _resolve, [(entry.future, result) for entry, result in zip(batch, results, strict=True)]
        )

    def _deliver(
        self,
        action: Callable[[asyncio.Future[R], Any], None],
        outcomes: list[tuple[asyncio.Future[R], Any]],
    ) -> None:
        """Hand a whole batch's outcomes to the event loop in one wake-up."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(_settle_all, action, outcomes)
        except RuntimeError:  # loop closed between the check and the call: nobody is waiting
            _log.debug("classifier %s: event loop closed before delivery", self.name)

    def _report_timing(self, stage: str, seconds: float) -> None:
        if self._on_timing is None:
            return
        try:
            self._on_timing(self.name, stage, seconds)
        except Exception:  # a metrics bug must not kill the worker thread
            _log.exception("classifier %s: on_timing callback failed", self.name)

    def _report_batch(self, size: int) -> None:
        if self._on_batch is None:
            return
        try:
            self._on_batch(self.name, size)
        except Exception:  # a metrics bug must not kill the worker thread
            _log.exception("classifier %s: on_batch callback failed", self.name)
