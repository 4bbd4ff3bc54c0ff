"""Time, cost and energy to train: the whole run, from one step's estimate.

With D tokens to train on, R tokens per second (fitplan.timing.step: B*s/T_step), N GPUs
drawing P watts each, a PUE and a price per GPU-hour:

    T          = D / R                  seconds of wall clock (Narayanan et al. Eq. 4's quantity)
    days       = T / 86400
    gpu_hours  = N * T / 3600
    energy     = N * P * PUE * T        joules; / 3.6e9 for MWh
    cost       = gpu_hours * price

Energy counts the GPU boards alone at P (the preset's TDP by default: a ceiling on the average
draw); host CPUs, network and cooling are left out unless --pue (default 1) scales for them.

Narayanan et al. Eq. 4 estimates the same T as 8*T_tokens*P_params/(n*X), X the achieved
FLOP/s per GPU: their Eq. 3 hardware FLOPs per token (full recompute: a forward, a recomputed
forward and a backward of twice its cost, 8 FLOPs per parameter) with its attention and logit
terms dropped. fitplan's T is the same ratio with every term kept: D * F_hw_token / (N * X),
F_hw_token the step's hardware FLOPs per token (tests/unit/test_to_train.py checks both).

Each formula is plain arithmetic, so it runs on one configuration's numbers (a Trace that
explains it) and on NumPy arrays of candidates (RAW, the search's --rank cost).
"""

from fitplan.explain import SECONDS, Term, Trace, formula
from fitplan.record import record
from fitplan.sources import Cite

HERE = Cite("fitplan", "formulas.md#time-cost-and-energy-to-train")
SECONDS_PER_DAY = 86_400
SECONDS_PER_HOUR = 3_600
JOULES_PER_MWH = 3.6e9
BOARD_ONLY = ("GPU board power only (P: the preset's TDP unless --gpu-power says otherwise); host CPUs, network "
              "and cooling are outside it unless --pue scales for them",)


@formula("to_train/seconds", "D/R", Cite("narayanan", "Sec. 5.1, Eq. 4 (end-to-end training time)"), SECONDS,
         ("every step runs at the estimated rate: no restarts, evaluation or data stalls",))
def train_seconds(*, D, R):
    """Wall-clock seconds to train D tokens at R tokens per second."""
    return D / R


@formula("to_train/days", "T/86400", HERE, "days")
def train_days(*, T):
    return T / SECONDS_PER_DAY


@formula("to_train/gpu_hours", "N*T/3600", HERE, "GPU-hours")
def gpu_hours(*, N, T):
    """Every GPU is held for the whole run."""
    return N * T / SECONDS_PER_HOUR


@formula("to_train/energy_mwh", "N*P*PUE*T/3.6e9", HERE, "MWh", BOARD_ONLY)
def energy_mwh(*, N, P, PUE, T):
    return N * P * PUE * T / JOULES_PER_MWH


@formula("to_train/cost", "H*price", HERE, "currency")
def train_cost(*, H, price):
    """GPU-hours at a price per GPU-hour, in whatever currency the price is in."""
    return H * price


@formula("to_train/narayanan_eq4", "8*T*P/(n*X)", Cite("narayanan", "Sec. 5.1, Eq. 4"), SECONDS,
         ("8 FLOPs per parameter per token: full recompute, attention and logits terms dropped",))
def narayanan_end_to_end_s(*, T, P, n, X):
    """Narayanan et al.'s estimate of end-to-end training time: T tokens, P parameters, n GPUs
    at X FLOP/s each (GPT-3 175B, 300B tokens, 1024 A100 at 140 TFLOP/s: about 34 days)."""
    return 8 * T * P / (n * X)


def gpu_hours_to_train(ev, *, tokens, num_gpus, tokens_per_s):
    """GPU-hours to train `tokens` (elementwise over the search's candidates). For a fixed token
    count and price, cost orders as this does: N * T_step / tokens_per_step."""
    T = ev(train_seconds, D=tokens, R=tokens_per_s)
    return ev(gpu_hours, N=num_gpus, T=T)


@record(slots=True)
class ToTrain:
    """One configuration's whole run. days and gpu_hours are None without a step time (the GPU
    has no peak rate for the recipe's precision), energy_mwh without a power figure, cost
    without a price."""
    tokens: int
    num_gpus: int
    seconds: float | None
    days: float | None
    gpu_hours: float | None
    energy_mwh: float | None
    cost: float | None
    power_watts: float | None
    pue: float
    gpu_hour_price: float | None
    terms: tuple[Term, ...] = ()


def to_train(setup, step) -> ToTrain | None:
    """The run's time, GPU-hours, energy and cost for one configuration's step
    (fitplan.timing.step.StepBreakdown, or None when it has no time); None without
    training.train_tokens."""
    tokens = setup.training.train_tokens
    if tokens is None:
        return None
    cluster = setup.cluster
    power, pue, price = cluster.gpu.power_watts, cluster.pue, cluster.gpu_hour_price
    n = cluster.num_gpus if step is None else step.config.world_size
    if step is None:
        return ToTrain(tokens, n, None, None, None, None, None, power, pue, price)
    ev = Trace()
    T = ev(train_seconds, D=tokens, R=step.tokens_per_s)
    days = ev(train_days, T=T)
    H = ev(gpu_hours, N=n, T=T)
    energy = None if power is None else ev(energy_mwh, N=n, P=power, PUE=pue, T=T)
    cost = None if price is None else ev(train_cost, H=H, price=price)
    return ToTrain(tokens, n, T, days, H, energy, cost, power, pue, price, tuple(ev.terms))
