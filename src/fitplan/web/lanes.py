"""Two lanes of analyses, so a light answer never queues behind a heavy one.

Light: a single plan (one configuration, or the seed report), infer, and the export of a given
layout: each is a few milliseconds of arithmetic. Heavy: everything that searches (plan
--suggest, search, an export without a layout), sweeps (a search per point) and compare.
Each lane is its own AnalysisPool, with its own workers, queue and budget; the heavy lane's
workers run under SCHED_BATCH, so with every core busy on searches a waking fast-lane worker,
or a thread that serves the page, preempts them rather than waiting for its turn.

A request put in the wrong lane is only slower or faster, never wrong: both lanes answer with
the same fitplan.service.respond under the same budget.
"""
from __future__ import annotations

import threading

from fitplan.web import limits as L
from fitplan.web.pool import AnalysisPool
from fitplan.web.worker import run_analysis


def is_light(request) -> bool:
    """A request answered without a search: a single plan, infer, or an export of a given layout."""
    values = request.values
    if request.command == "infer":
        return True
    if request.command == "plan":
        return not values.get("suggest")
    if request.command == "export":
        return gives_layout(request)
    return False


def gives_layout(request) -> bool:
    """Whether the request names a layout (a degree or setting beyond the micro-batch): then
    fitplan.resolve.explicit_config holds and nothing is searched. An option given as false
    (e.g. sequence_parallel: false) is not counted, as resolve drops it."""
    from fitplan.request import command_flags
    return any(f.path[0] == "config" and f.path[-1] != "micro_batch" and request.values.get(f.key) not in (None, False)
               for f in command_flags(request.command))


class Lanes:
    """The fast lane and the heavy lane behind one `run`, as AnalysisPool's interface."""

    def __init__(self, light: AnalysisPool | None = None, heavy: AnalysisPool | None = None, target=run_analysis):
        self.light = light or AnalysisPool(workers=L.LIGHT_WORKERS, queue=L.LIGHT_QUEUE, target=target)
        self.heavy = heavy or AnalysisPool(workers=L.HEAVY_WORKERS, queue=L.HEAVY_QUEUE, target=target,
                                           batch=True)

    @property
    def workers(self) -> int:
        return self.light.workers + self.heavy.workers

    @property
    def running(self) -> int:
        return self.light.running + self.heavy.running

    def lane(self, request) -> AnalysisPool:
        return self.light if is_light(request) else self.heavy

    def run(self, request, cancelled=None):
        return self.lane(request).run(request, cancelled)

    def start(self) -> None:
        self.light.start()
        self.heavy.start()

    def close(self) -> None:
        self.light.close()
        self.heavy.close()


_default: Lanes | None = None
_default_lock = threading.Lock()


def default_lanes() -> Lanes:
    """The lanes `handle` uses when it is called without a pool (the app as a plain function)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Lanes()
        return _default
