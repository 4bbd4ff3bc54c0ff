"""What a framework adds around the components: compute slowed by the communication it hides, host time
per layer pass, and the wait for the slowest GPU.

Each is one end-to-end constant of fitplan.timing.calibration times a quantity the model already has:
  overlap slowdown   sigma * (communication hidden behind compute)      collectives take SMs and HBM
                                                                        bandwidth from the GEMMs they overlap
  host overhead      omega * m * L * passes                             launches and bookkeeping per layer
                                                                        pass that the GPU waits for
  stragglers         cv * sqrt(2 ln N) * (the rest of the step)         the expected maximum of N GPUs'
                                                                        times, each cv above or below the mean
"""
import math

from fitplan.arith import is_array, maximum
from fitplan.explain import COUNT, SECONDS, formula
from fitplan.sources import Cite
from fitplan.specs.parallel import Recompute

CAL = Cite("fitplan", "docs/calibration.md (the constant fitted end to end)")


@formula("time/overlap_slowdown", "sigma*sum over tp, ep, cp, dp of (busy - exposed)", CAL, SECONDS,
         ("communication hidden behind compute still takes SMs and HBM bandwidth from it: sigma seconds of compute "
          "per second of hidden traffic (DeepSeek-V3 gives 20 of 132 SMs to communication, Sec. 3.2.2)",))
def overlap_slowdown_s(*, sigma, hidden):
    return sigma * maximum(hidden, 0)


def _passes_text(*, recompute, **_):
    return "m*L*(3 if full recompute else 2)*omega" if recompute is None else (
        f"m*L*{3 if str(recompute) == 'full' else 2}*omega")


@formula("time/host_overhead", _passes_text, CAL, SECONDS,
         ("each layer's forward, backward (and full recompute) pass costs omega of host time the GPU waits for: "
          "kernel launches and framework bookkeeping; none under CUDA graphs",))
def host_overhead_s(*, m, L, omega, recompute=None):
    passes = 3 if recompute == Recompute.FULL else 2
    return m * L * passes * omega


def _sqrt_2ln(N):
    if is_array(N):
        import numpy as np
        return np.sqrt(2 * np.log(np.maximum(N, 1)))
    return math.sqrt(2 * math.log(max(N, 1)))


@formula("time/straggler_factor", "sqrt(2*ln N)", Cite("fitplan", "docs/calibration.md#stragglers (the expected "
                                                                  "maximum of N normal variates, Gumbel's limit)"),
         COUNT, ("N: the GPUs that synchronise every step",))
def straggler_factor(*, N):
    return _sqrt_2ln(N)


@formula("time/straggler", "cv*sqrt(2*ln N)*T_rest", CAL, SECONDS,
         ("the step waits for the slowest of N GPUs, each running cv above or below the mean",))
def straggler_s(*, cv, factor, T_rest):
    return cv * factor * T_rest
