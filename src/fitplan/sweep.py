"""The sweep: the least per-GPU memory any legal configuration needs at each GPU count, sequence length or
micro-batch (fitplan sweep), each point a search (fitplan.search) over the space fitplan.answers.space_for
gives. Pure, as fitplan.answers: nothing here parses, prints or opens a file.
"""
from dataclasses import replace

from fitplan.answers import WORK_CANDIDATES, space_for
from fitplan.errors import SpecError
from fitplan.memory.breakdown import Breakdown, Setup
from fitplan.record import record
from fitplan.request import SearchOptions
from fitplan.specs import ClusterSpec, TrainingSpec
from fitplan.specs.declare import field_bounds
from fitplan.specs.parallel import ParallelConfig

MAX_SWEEP_POINTS = 64


@record(slots=True)
class SweepPoint:
    x: int
    per_gpu_bytes: int | None     # the least any legal configuration needs; None: nothing is legal
    least: Breakdown | None

    def fits(self, usable_bytes: int) -> bool:
        return self.per_gpu_bytes is not None and self.per_gpu_bytes <= usable_bytes


@record(slots=True)
class SweepAnswer:
    setup: Setup
    over: str                     # "gpus", "seq-len" or "micro-batch"
    points: tuple[SweepPoint, ...]

    @property
    def usable_bytes(self) -> int:
        return self.setup.cluster.usable_bytes

    @property
    def fitting(self) -> list[int]:
        return [p.x for p in self.points if p.fits(self.usable_bytes)]

    @property
    def best(self) -> int | None:
        """The smallest GPU count, or the largest sequence length or micro-batch, that fits."""
        fitting = self.fitting
        if not fitting:
            return None
        return min(fitting) if self.over == "gpus" else max(fitting)


# the x axes: the field each one sets, its flag, and the default values (powers of two)
SWEEP_AXES = {"gpus": (ClusterSpec, "num_gpus", "--gpus"), "seq-len": (TrainingSpec, "seq_len", "--seq-len"),
              "micro-batch": (ParallelConfig, "micro_batch", "--micro-batch")}
MAX_DEFAULT_MICRO_BATCH = 2**12


def sweep_values(over: str, values, *, global_batch: int | None = None) -> list[int]:
    """The x values: given, or powers of two. GPU counts, sequence lengths and micro-batches keep
    the ranges that --gpus, --seq-len and --micro-batch declare; the default micro-batches stop
    at the global batch (a micro-batch holds at most the whole batch)."""
    cls, name, flag = SWEEP_AXES[over]
    if values is not None:
        limit = int(field_bounds(cls, name)[1])
        if not values or min(values) < 1 or max(values) > limit or len(values) > MAX_SWEEP_POINTS:
            raise SpecError(f"--values: give 1 to {MAX_SWEEP_POINTS} numbers, each 1 to {limit:,} "
                            f"(the {flag} range)")
        return sorted(set(values))
    if over == "gpus":
        return [2**k for k in range(0, 13)]
    if over == "micro-batch":
        top = min(MAX_DEFAULT_MICRO_BATCH, global_batch or MAX_DEFAULT_MICRO_BATCH)
        return [2**k for k in range(0, top.bit_length()) if 2**k <= top]
    return [2**k for k in range(9, 18)]


def sweep(setup: Setup, micro_batch: int, *, over: str, values, opts: SearchOptions, fixed: dict) -> SweepAnswer:
    """At each x, the least per-GPU bytes any legal configuration needs, and that configuration.
    Over micro-batches each point searches that micro-batch alone (not its halvings)."""
    from fitplan.search import check_size, search, space_size
    setups = []
    for x in sweep_values(over, values, global_batch=setup.training.global_batch):
        if over == "gpus":
            setups.append((x, replace(setup, cluster=replace(setup.cluster, num_gpus=x))))
        elif over == "seq-len":
            setups.append((x, replace(setup, training=replace(setup.training, seq_len=x))))
        else:
            setups.append((x, setup))
    if over == "micro-batch":
        spaces = [replace(space_for(s, x, opts, fixed), micro_batches=(x,)) for x, s in setups]
    else:
        spaces = [space_for(s, micro_batch, opts, fixed) for _, s in setups]
    work = sum(space_size(s.cluster.num_gpus, space) for (_, s), space in zip(setups, spaces))
    if work > WORK_CANDIDATES:
        raise SpecError(f"this sweep would search {work:,} candidates (limit {WORK_CANDIDATES:,}); give fewer or "
                        f"smaller --values, a smaller --micro-batch or --max-cp, or fix an axis such as --tp")
    for (x, s), space in zip(setups, spaces):     # each point's own search limit, before any point is searched
        check_size(s.cluster.num_gpus, space, where=f"--values {x}: ")
    points = []
    for (x, s), space in zip(setups, spaces):
        least = search(s, space, top=1, rank="disturbance").least_loaded
        points.append(SweepPoint(x, None if least is None else int(least.per_gpu_bytes), least))
    return SweepAnswer(setup, over, tuple(points))
