"""One configuration's step time, explained: StepBreakdown (evaluate_step) and the per-layer view (per_layer).

Both run fitplan.timing.step.step_time: evaluate_step untraced, and again with a Trace when its terms are
read; per_layer untraced on each pipeline rank.
"""
from dataclasses import field
from typing import Callable

from fitplan.explain import RAW, Term, Trace
from fitplan.memory.breakdown import Setup, stage_at
from fitplan.record import record
from fitplan.specs import ParallelConfig
from fitplan.specs.parallel import Schedule
from fitplan.timing import comm as CM
from fitplan.timing import uncertainty as U
from fitplan.timing.step import AXES, PARTS, step_time
from fitplan.timing.traffic import DDP_BUCKET_BYTES
from fitplan.timing.work import pacing_rank

@record(slots=True)
class AxisComm:
    """One parallel axis's traffic on one GPU per step."""
    axis: str
    degree: int              # the group size the traffic runs over (dp x cp for dp)
    bytes_per_step: float    # bytes this GPU sends per step (ring wire bytes)
    exposed_s: float         # the part of busy_s on the critical path
    intra_node: bool
    link: str                # the link tier's name, e.g. "NVLink 3"
    busy_s: float = 0.0      # seconds the traffic occupies its link, hidden behind compute or not
    name: str = ""           # how reports name the group: "dp x cp" where the dp group spans cp too
    nodes: int = 1           # nodes (NVLink domains) one group spans

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.axis)


@record(slots=True)
class StepBreakdown:
    """The step time of one configuration, term by term, with the Terms that explain it (`terms`)."""
    config: ParallelConfig
    parts: dict                  # PARTS key -> seconds; they add up to step_time_s
    step_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float        # achieved hardware TFLOP/s per GPU (1e12 FLOP/s), recompute included
    mfu: float                   # fractions in [0, 1]; the attention core counted in full (Narayanan et al.)
    hfu: float
    mfu_causal: float            # the attention core counted at half, for a causal mask (FlashAttention's)
    num_microbatches: int
    bubble_fraction: float
    comm: dict                   # axis -> AxisComm, for AXES
    slowest_stage: int = 0       # the pipeline rank that paces the step (most FLOPs per micro-batch)
    uncertainty: object = None   # fitplan.timing.uncertainty.Band: the 80% band around step_time_s
    explain: Callable[[], tuple] = field(default=tuple, compare=False, repr=False)   # the terms, computed when read

    @property
    def terms(self) -> tuple[Term, ...]:
        """Every formula evaluated, in call order. evaluate_step times the step untraced (the plans print
        only its numbers) and records the Terms only when they are read (`fitplan compare`), by timing it
        again with a Trace: the same code on the same ints gives the same values."""
        return self.explain()

    @property
    def shares(self) -> dict:
        """Each part as a fraction of the step."""
        return {k: v / self.step_time_s for k, v in self.parts.items()}

    @property
    def exposed_comm_s(self) -> dict:
        return {axis: c.exposed_s for axis, c in self.comm.items()}


def evaluate_step(setup: Setup, config: ParallelConfig, *, bucket_bytes: int = DDP_BUCKET_BYTES) -> StepBreakdown:
    """The step time of one configuration, with its explanation (StepBreakdown.terms, recorded when read)."""
    out = step_time(RAW, setup, config, bucket_bytes=bucket_bytes)

    def explain() -> tuple:
        trace = Trace()
        step_time(trace, setup, config, bucket_bytes=bucket_bytes)
        return tuple(trace.terms)
    exposed = {"tp": out["time/tp_exposed"], "ep": out["time/ep_exposed"], "cp": out["time/cp_exposed"],
               "pp": out["time/pp_exposed"], "dp": out["time/dp_exposed"] + out["time/dp_after_step"]}
    degree = {"tp": config.tp, "ep": config.ep, "cp": config.cp, "pp": config.pp, "dp": config.dp * config.cp}
    name = {"dp": "dp x cp"} if config.cp > 1 else {}   # gradients and ZeRO shards span the cp ranks too
    comm = {axis: AxisComm(axis=axis, degree=degree[axis], bytes_per_step=out[f"comm/{axis}_bytes"],
                           exposed_s=exposed[axis], intra_node=bool(out[f"link/{axis}_intra"]),
                           link=CM.link_name(bool(out[f"link/{axis}_intra"]), setup.cluster.gpu),
                           busy_s=float(out[f"comm/{axis}_busy_s"]), name=name.get(axis, axis),
                           nodes=int(round(float(out[f"link/{axis}_nodes"])))) for axis in AXES}
    return StepBreakdown(config=config, parts={k: out[k] for k in PARTS}, explain=explain,
                         step_time_s=out["time/step"], tokens_per_s=out["rate/tokens"],
                         tflops_per_gpu=out["rate/flops_per_gpu"] / 1e12, mfu=out["ratio/mfu"],
                         hfu=out["ratio/hfu"], mfu_causal=out["ratio/mfu_causal"],
                         num_microbatches=out["pipeline/microbatches"],
                         bubble_fraction=out["pipeline/bubble_fraction"], comm=comm,
                         slowest_stage=int(out["pipeline/slowest_stage"]),
                         uncertainty=U.band(setup, float(out["time/step"])))


@record(slots=True)
class StageLayers:
    """One pipeline rank's layer, one micro-batch (the stage's average layer): compute and each
    axis's traffic, busy on its link and exposed; and the stage's micro-batch and step totals."""
    stage: int
    layers: int                  # layers one micro-batch crosses on this rank (DualPipe: half the rank's)
    dense_layers: int | None     # of them, dense (MoE models)
    forward_s: float
    backward_s: float            # without the recompute
    recompute_s: float
    comm: dict                   # axis -> (busy_s, exposed_s) per layer and micro-batch (pp: per micro-batch)
    microbatch_forward_s: float  # the stage's whole forward of one micro-batch (embedding, head included)
    microbatch_backward_s: float  # and backward, recompute included
    exposed_s: dict              # axis -> the stage's exposed seconds per step
    paces: bool = False          # the rank that paces the step


PER_LAYER_AXES = ("tp", "ep", "cp", "dp", "pp")


def per_layer(setup: Setup, config: ParallelConfig) -> tuple[StageLayers, ...]:
    """Forward, backward, recompute and each axis's traffic per layer, for every pipeline rank
    (Calculon's -l): the same step_time, timed on each rank in turn."""
    pacing = pacing_rank(setup, config)
    out = []
    for i in range(config.pp):
        r = step_time(RAW, setup, config, stage_index=i)
        stage = stage_at(RAW, setup.model, config, i)
        half = 0.5 if config.schedule == Schedule.DUALPIPE else 1
        comm = {axis: (float(r[f"layer/{axis}_busy_s"]), float(r[f"layer/{axis}_exposed_s"]))
                for axis in PER_LAYER_AXES}
        out.append(StageLayers(
            stage=i, layers=int(round(float(r["layer/count"]))),
            dense_layers=None if stage.n_dense is None else int(round(float(stage.n_dense * half))),
            forward_s=float(r["layer/forward_s"]), backward_s=float(r["layer/backward_s"]),
            recompute_s=float(r["layer/recompute_s"]), comm=comm,
            microbatch_forward_s=float(r["time/forward_microbatch"]),
            microbatch_backward_s=float(r["time/backward_microbatch"]),
            exposed_s={axis: float(r[f"time/{axis}_exposed"]) for axis in PER_LAYER_AXES}, paces=i == pacing))
    return tuple(out)
