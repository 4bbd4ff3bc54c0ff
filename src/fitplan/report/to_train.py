"""Time, cost and energy to train (--train-tokens): the table and the lines beside each layout."""
from fitplan.report.render import Heading, Lines, Table
from fitplan.units import fmt_count


TO_TRAIN_CITE = "[formulas.md#time-cost-and-energy-to-train; Narayanan et al. Eq. 4]"


def _amount(x) -> str:
    """A day count, GPU-hours, energy or cost for reading: 1,234,567 / 409.9 / 0.042."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:.3g}"


def to_train_heading(setup) -> Heading:
    return Heading(f"To train {fmt_count(setup.training.train_tokens)} tokens  {TO_TRAIN_CITE}")


def to_train_note(setup) -> str:
    """What the energy and cost columns count."""
    c = setup.cluster
    energy = ("energy: no power figure for this GPU (--gpu-power sets one)" if c.gpu.power_watts is None else
              f"energy: {c.gpu.power_watts:g} W per GPU x PUE {c.pue:g}"
              + (", GPU boards only: no host, network or cooling" if c.pue == 1 else ""))
    cost = ("cost: no price (--gpu-hour-price sets one)" if c.gpu_hour_price is None else
            f"cost: GPU-hours x {c.gpu_hour_price:g} per GPU-hour")
    return f"days = tokens / (tokens/s) / 86400, GPU-hours = N x seconds / 3600; {energy}; {cost}"


def to_train_table(setup, labels, step_list) -> list:
    """One row per plan: days, GPU-hours, cost and energy to train --train-tokens."""
    from fitplan.timing.to_train import to_train
    rows = []
    for label, st in zip(labels, step_list):
        t = to_train(setup, st)
        rows.append((label, _amount(t.days), _amount(t.gpu_hours), _amount(t.cost), _amount(t.energy_mwh)))
    missing = ("; -: no step time (a global batch that dp x micro-batch does not divide, or no peak rate for the "
               "recipe's precision)" if any(r[1] == "-" for r in rows) else "")
    return [to_train_heading(setup),
            Table(("", "days", "GPU-hours", "cost", "energy MWh"), tuple(rows), align="lrrrr",
                  note=to_train_note(setup) + missing)]


def to_train_line(setup, st) -> str:
    """One plan's run in a line, for the minimum viable and recommended layouts."""
    from fitplan.timing.to_train import to_train
    t = to_train(setup, st)
    if t.days is None:
        return f"to train {fmt_count(t.tokens)} tokens: no time estimate"
    b = st.uncertainty
    span = (lambda x: "") if b is None else (
        lambda x: f" ({_amount(x * b.low_s / st.step_time_s)}-{_amount(x * b.high_s / st.step_time_s)})")
    return (f"to train {fmt_count(t.tokens)} tokens: {_amount(t.days)}{span(t.days)} days, {_amount(t.gpu_hours)} "
            f"GPU-hours, cost {_amount(t.cost) + span(t.cost) if t.cost is not None else '- (no --gpu-hour-price)'}, "
            f"{_amount(t.energy_mwh) if t.energy_mwh is not None else '-'} MWh"
            + ("" if b is None else f"  (in brackets: the step's {b.coverage:.0%} band)"))


def to_train_blocks(setup, st) -> list:
    """One configuration's run, each number with its formula and inputs."""
    from fitplan.timing.to_train import to_train
    t = to_train(setup, st)
    if t.days is None:
        return [to_train_heading(setup), Lines(("not estimated: no step time for this configuration",))]
    c = setup.cluster
    lines = [f"time       D/R = {t.tokens:,} / {st.tokens_per_s:,.0f} tokens/s = {t.seconds:,.4g} s = "
             f"{_amount(t.days)} days",
             f"GPU-hours  N*T/3600 = {t.num_gpus:,} x {t.seconds:,.4g} s / 3600 = {_amount(t.gpu_hours)}"]
    if t.energy_mwh is None:
        lines.append("energy     not estimated: the GPU states no power (--gpu-power sets it)")
    else:
        lines.append(f"energy     N*P*PUE*T/3.6e9 = {t.num_gpus:,} x {t.power_watts:g} W x {t.pue:g} x "
                     f"{t.seconds:,.4g} s / 3.6e9 = {_amount(t.energy_mwh)} MWh"
                     + (" (GPU boards only: no host, network or cooling; --pue scales for them)" if t.pue == 1
                        else f" (PUE {t.pue:g}: facility energy)"))
    if t.cost is None:
        lines.append("cost       not estimated: no price (--gpu-hour-price sets one)")
    else:
        lines.append(f"cost       H*price = {_amount(t.gpu_hours)} x {c.gpu_hour_price:g} = {_amount(t.cost)}")
    return [to_train_heading(setup), Lines(tuple(lines))]
