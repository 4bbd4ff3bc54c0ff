"""The pipeline bubble: time a pipeline rank sits idle while the pipeline fills and drains.

Symbols, as in [narayanan] Sec. 2.2 and 3.1: p pipeline-parallel degree, m micro-batches
per step per pipeline (B/(b*d)), v model chunks per pipeline rank (interleaved schedule),
t_f, t_b one micro-batch's forward and backward time on a stage.

  1F1B (PipeDream-Flush), like GPipe   bubble fraction (p - 1)/m          Sec. 2.2.1
  interleaved 1F1B, v chunks           bubble fraction (p - 1)/(v*m)      Sec. 2.2.2
The fraction is relative to the ideal time m*(t_f + t_b): a step takes
(m + (p - 1)/v)*(t_f + t_b) (Eq. 1 for v = 1).
"""
from fitplan.explain import COUNT, RATIO, SECONDS, formula
from fitplan.sources import Cite

ASSUMES = ("all stages take the busiest stage's time per micro-batch; the bubble idles for whatever that "
           "time contains (compute and exposed tp, cp, pp traffic)",)


@formula("pipeline/bubble_fraction", "(p - 1)/(v*m)", Cite("narayanan", "Sec. 2.2.2"), RATIO,
         ("interleaving needs m to be a multiple of p (checked in specs.compat)",))
def bubble_fraction_interleaved(*, p, m, v):
    """Interleaved 1F1B; with v = 1 it is the 1F1B fraction (p - 1)/m, Sec. 2.2.1."""
    return (p - 1) / (v * m)


def _schedule_text(*, schedule, **_):
    return {"zero-bubble": "(p - 1)*T_f/(m*(T_f + T_b))  (ZB-H1, T_W = T_b/2)",
            "dualpipe": "(p/2 - 1)*(T_f + T_b/2)/(m*(T_f + T_b))  (F&B = F + B, W = B/2)"}[schedule]


@formula("pipeline/bubble_fraction", _schedule_text,
         Cite("qi-zero-bubble", "Sec. 3.1; DualPipe: deepseek-v3 Table 2"), RATIO,
         ("the backward splits evenly into input gradients and weight gradients (T_W = T_b/2)",
          "DualPipe: an overlapped forward-and-backward chunk takes F + B (it hides communication, not compute)"))
def bubble_fraction_schedule(*, p, m, T_f, T_b, schedule):
    """ZB-H1 [qi 2023 Sec. 3.1]: bubble (p - 1)(T_F + T_B - T_W) where 1F1B has
    (p - 1)(T_F + T_B + T_W), T_B and T_W the input- and weight-gradient halves of the
    backward; with T_W = T_b/2 that is (p - 1)*T_f. DualPipe [deepseek-v3 Table 2]:
    (p/2 - 1)(F&B + B - 3W) with F, B, W one stage's times, F&B = F + B, W = B/2."""
    if schedule == "zero-bubble":
        return (p - 1) * T_f / (m * (T_f + T_b))
    return (p / 2 - 1) * (T_f + T_b / 2) / (m * (T_f + T_b))


@formula("time/bubble", "fraction*T_busy", Cite("narayanan", "Sec. 2.2 and Eq. 1"), SECONDS, ASSUMES)
def bubble_s(*, fraction, T_busy):
    """Idle seconds per step; T_busy is the m micro-batches' pipelined work on one stage."""
    return fraction * T_busy


@formula("time/microbatches", "m*(T_f + T_b)", Cite("narayanan", "Eq. 1"), SECONDS)
def microbatches_s(*, m, T_f, T_b):
    """Seconds of compute for all m micro-batches on one stage, without the bubble."""
    return m * (T_f + T_b)


# No global batch given: 4 micro-batches per pipeline stage. The 1F1B bubble is then
# (p - 1)/(4p) < 25%, m is a multiple of p as interleaving needs, and m >= p, so the
# memory model's in-flight count (which saturates at p) is what this m gives.
DEFAULT_MICROBATCHES_PER_STAGE = 4


@formula("pipeline/microbatches", lambda *, B, **_: "B/(b*d)" if B is not None else
         f"{DEFAULT_MICROBATCHES_PER_STAGE}*p  (no global batch given: fitplan's default)",
         Cite("narayanan", "Sec. 3.1 (m = B/(b*d))"), COUNT)
def num_microbatches(*, B, b, d, p):
    """Micro-batches per step per pipeline, from the global batch B (sequences)."""
    if B is None:
        return DEFAULT_MICROBATCHES_PER_STAGE * p
    return B // (b * d)
