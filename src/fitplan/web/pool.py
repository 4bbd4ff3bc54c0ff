"""The analyses' worker processes: a fixed number per pool, a bounded queue in front of them, a
wall-clock budget per analysis, and a dead worker replaced with its request retried once.

Why worker processes, not threads, for the time budget: a Python thread cannot be stopped
from outside, so a thread pool could only enforce a budget cooperatively, by a deadline the
search and sweep loops check; that needs hooks in the core (which bounds its own work with a
separate work budget) and still misses time spent inside one long NumPy call. A process can be
killed at any instant, so the budget holds whatever the analysis does, and analyses run on all
cores instead of sharing one GIL with the threads that serve the page. The cost is small:
workers are started once (`fitplan serve` starts them all at startup; a killed one is replaced
at once) and stay alive between requests, and only the Request and the reply's text, exit code
and notes cross the pipe. As with any use of multiprocessing, a program that embeds make_server
must guard its own top level with `if __name__ == "__main__":` (the `fitplan` command and
`python -m fitplan.web` are).

A worker that dies mid-request (killed from outside, out of memory) is replaced and the request
is run once more on a fresh worker; if that one dies too the answer is WorkerLost (a 503), never
a 500: the request may be fine and the machine short of memory. An exception inside the analysis
is a bug in fitplan, reported as ("crash", traceback) and answered 500 with one generic line.
What runs inside a worker is fitplan.web.worker.
"""
from __future__ import annotations

import multiprocessing
import threading
import time

from fitplan.web import limits as L
from fitplan.web.worker import READY, run_analysis, worker_main

STARTUP_S = 120.0    # the longest a new worker may take to import fitplan
POLL_S = 0.1         # how often a waiting request asks whether its client is still there


class Busy(Exception):
    """Every worker is taken and the queue is full (or the wait for a worker ran out)."""

    def __init__(self, running: int):
        super().__init__(running)
        self.running = running


class OverBudget(Exception):
    """The analysis ran past its time budget; its worker was killed."""

    def __init__(self, budget_s: float):
        super().__init__(budget_s)
        self.budget_s = budget_s


class Cancelled(Exception):
    """The client went away before its answer was ready: the request left the queue, or its
    analysis was stopped (the worker killed and replaced), so it holds no place another needs."""


class WorkerLost(Exception):
    """The worker process died mid-analysis, and so did the one the request was retried on."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def _context():
    """spawn: a fresh interpreter per worker (fork+exec, so forking this threaded process is never
    a question), given this process's sys.path before it imports anything, so a worker runs the
    very fitplan the server imported. (Python 3.11's forkserver imports its preloads before it
    applies sys.path, which can load another copy of fitplan.) The cost is a few tenths of a
    second per worker start: at `fitplan serve` startup and after a worker is killed."""
    return multiprocessing.get_context("spawn")


class _Worker:
    def __init__(self, ctx, target, batch: bool):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, target, batch), daemon=True,
                                   name="fitplan-analysis")
        self.process.start()
        child.close()
        self._killed = False
        self._kill_lock = threading.Lock()

    def wait_ready(self) -> None:
        """Until the worker has imported fitplan (a few tenths of a second; seconds on a busy
        machine). OSError if it died instead."""
        try:
            if self.conn.poll(STARTUP_S) and self.conn.recv() == READY:
                return
        except (EOFError, OSError):
            pass
        self.kill()
        raise OSError(f"a worker process did not start within {STARTUP_S:g} s")

    def kill(self) -> None:
        """Once, whichever threads ask: close() and the request's own thread both kill a busy
        worker, and a second conn.close() racing the first closed a descriptor twice (EBADF, or
        worse, one that another thread had just opened)."""
        with self._kill_lock:
            if self._killed:
                return
            self._killed = True
        try:
            self.process.kill()
            self.process.join(5)
        except (OSError, ValueError, AssertionError):
            pass
        self.conn.close()


_DIED = object()     # an attempt whose worker died under it


class AnalysisPool:
    """A fixed number of worker processes, a bounded queue in front of them, and a wall-clock
    budget per analysis. `run` answers at once with Busy when the queue is full, with Busy
    after queue_wait_s without a free worker, with OverBudget (the worker killed and a fresh
    one started) after budget_s, with WorkerLost when the worker dies and so does the one the
    request is retried on, else with the worker's result (see run_analysis). batch: the workers
    run under SCHED_BATCH (the heavy lane's: fitplan.web.worker.worker_main)."""

    def __init__(self, workers: int = L.ANALYSIS_WORKERS, queue: int = L.HEAVY_QUEUE,
                 budget_s: float = L.ANALYSIS_BUDGET_S, queue_wait_s: float = L.QUEUE_WAIT_S, target=run_analysis,
                 batch: bool = False):
        self.workers, self.queue, self.budget_s, self.queue_wait_s = workers, queue, budget_s, queue_wait_s
        self.target, self.batch = target, batch
        self.running = 0          # analyses in a worker now
        self.retried = 0          # requests run again after their worker died
        self._admitted = 0        # running + waiting
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._slots = threading.Semaphore(workers)
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._closed = False
        self._ctx = None

    def start(self) -> None:
        """Start every worker now rather than on first use (`fitplan serve` does); they import
        fitplan side by side, and this returns once all are ready."""
        started = [self._new_worker(wait=False) for _ in range(self.workers - len(self._all))]
        try:
            for worker in started:
                worker.wait_ready()
        except OSError:
            with self._lock:
                self._all.difference_update(started)
            for worker in started:
                worker.kill()
            raise
        with self._lock:
            self._idle.extend(started)

    def run(self, request, cancelled=None):
        """The worker's result for request. cancelled: a callable that says the client went
        away (then Cancelled, while the request waits for a worker or runs)."""
        with self._lock:
            if self._closed or self._admitted >= self.workers + self.queue:
                raise Busy(self.running)
            self._admitted += 1
        try:
            if not self._acquire(cancelled):
                raise Busy(self.running)
            try:
                result = self._attempt(request, cancelled)
                if result is _DIED and not self._closed:
                    with self._lock:
                        self.retried += 1
                    result = self._attempt(request, cancelled)
                if result is _DIED:
                    if self._closed:
                        raise Busy(self.running)
                    raise WorkerLost("the analysis worker process ended twice")
                return result
            finally:
                self._slots.release()
        finally:
            with self._lock:
                self._admitted -= 1

    def _acquire(self, cancelled) -> bool:
        """A free worker slot within queue_wait_s (False: none came)."""
        if cancelled is None:
            return self._slots.acquire(timeout=self.queue_wait_s)
        end = time.monotonic() + self.queue_wait_s
        while not self._slots.acquire(timeout=max(0.0, min(POLL_S, end - time.monotonic()))):
            if time.monotonic() >= end:
                return False
            if cancelled():
                raise Cancelled
        return True

    def _answered(self, worker: _Worker, cancelled) -> bool:
        """Whether the worker answers within budget_s (Cancelled when the client goes first)."""
        if cancelled is None:
            return worker.conn.poll(self.budget_s)
        end = time.monotonic() + self.budget_s
        while not worker.conn.poll(max(0.0, min(POLL_S, end - time.monotonic()))):
            if time.monotonic() >= end:
                return False
            if cancelled():
                raise Cancelled
        return True

    def _attempt(self, request, cancelled=None):
        """One run on one worker: its result, or _DIED when the worker died under it (it is then
        replaced). Past the budget, or with the client gone, the worker is killed and replaced."""
        try:
            worker = self._checkout()
        except OSError:                     # a fresh worker did not start (or the pool closed meanwhile)
            return _DIED
        done = False
        try:
            try:
                worker.conn.send(request)
                if not self._answered(worker, cancelled):
                    raise OverBudget(self.budget_s)
                result = worker.conn.recv()
            except (EOFError, OSError):     # the worker died (killed from outside, out of memory)
                return _DIED
            done = True
            return result
        finally:
            with self._lock:
                self.running -= 1
                keep = done and not self._closed
                if keep:
                    self._idle.append(worker)
                else:
                    self._all.discard(worker)
            if not keep:
                worker.kill()
                self._replace()

    def _replace(self) -> None:
        """Start a worker in place of a killed one now, so the next request does not wait for it."""
        if self._closed:
            return
        try:
            worker = self._new_worker()
        except OSError:
            return                   # the next request tries again
        with self._lock:
            if self._closed:
                self._all.discard(worker)
            else:
                self._idle.append(worker)
                return
        worker.kill()

    def _checkout(self) -> _Worker:
        with self._lock:
            self.running += 1
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                self._all.discard(worker)
        try:
            return self._new_worker()
        except BaseException:
            with self._lock:
                self.running -= 1
            raise

    def _new_worker(self, wait: bool = True) -> _Worker:
        """A started worker, counted in _all from the start so that close() kills it even while it
        is still importing (wait_ready then raises OSError)."""
        with self._start_lock:
            if self._ctx is None:
                self._ctx = _context()
            worker = _Worker(self._ctx, self.target, self.batch)
        with self._lock:
            self._all.add(worker)
        if wait:
            try:
                worker.wait_ready()
            except OSError:
                with self._lock:
                    self._all.discard(worker)
                raise
        return worker

    def pids(self) -> list[int]:
        """The worker processes' ids, busy or idle (for tests and benchmarks)."""
        with self._lock:
            return sorted(w.process.pid for w in self._all)

    def close(self) -> None:
        """Kill every worker, busy or not; a later run is Busy."""
        with self._lock:
            self._closed = True
            workers, self._idle = list(self._all), []
            self._all.clear()
        for w in workers:
            w.kill()
