"""The recommendation's justification and the time columns, from the core's numbers.

Everything here is wording over fitplan.timing.breakdown.evaluate_step and the memory
breakdowns; no formula lives here.
"""
from fitplan.analysis import FITS_WITH_MARGIN, LIKELY_OOM, risk
from fitplan.errors import SpecError
from fitplan.report.render import Lines, Table
from fitplan.units import fmt_gb, fmt_gib


def steps(setup, suggestions):
    """The step time of each suggestion (the search's, evaluated once: fitplan.search.Evaluated)
    or breakdown (evaluate_step), or None when the GPU cannot run the recipe's precision."""
    from fitplan.timing.breakdown import evaluate_step
    try:
        return [s.step if hasattr(s, "step") else evaluate_step(setup, s.config) for s in suggestions]
    except SpecError:
        return None


def step_times(setup, items, draw) -> tuple[list | None, list]:
    """The step time of each item (a suggestion or a breakdown) and the blocks `draw` makes of
    them; or, when the GPU cannot run the recipe's precision (fp8 on an A100), None and one line
    that says so, so that no report drops its time section silently."""
    step_list = steps(setup, items)
    if step_list is not None:
        return step_list, draw(step_list)
    from fitplan.errors import one_line
    from fitplan.timing.breakdown import evaluate_step
    try:
        evaluate_step(setup, items[0].config)
        why = "the time model declined this configuration"
    except SpecError as error:
        why = one_line(str(error))
    return None, [Lines((f"not estimated: {why}",))]


def legal_step(setup, config):
    """evaluate_step for a configuration the report did not search (the seed's DDP and ZeRO
    layouts), or None where a rule the time model relies on is broken (a global batch that
    dp x micro-batch does not divide) or the GPU cannot run the recipe's precision."""
    from fitplan.specs import compat
    from fitplan.timing.breakdown import evaluate_step
    if compat.check(setup.model, setup.training, setup.cluster, config, allow_cross_node_tp=True):
        return None
    try:
        return evaluate_step(setup, config)
    except SpecError:
        return None


def _links(step) -> str:
    parts = []
    for axis, c in step.comm.items():
        if c.degree > 1:
            where = "inside a node" if c.intra_node else "across nodes"
            busy, exposed = f"{c.busy_s:.3g}", f"{c.exposed_s:.3g}"   # traffic that hides says for how long
            time = f"{exposed} s exposed" if busy == exposed else f"{busy} s on the link, {exposed} s of it exposed"
            parts.append(f"{c.name} {c.degree} {where} over {c.link} ({fmt_gb(c.bytes_per_step)} GB/step/GPU, {time})")
    return "; ".join(parts) or "no model-parallel or data-parallel traffic"


def time_table(suggestions, step_list) -> Table:
    rows = []
    for i, (s, st) in enumerate(zip(suggestions, step_list), 1):
        sh = st.shares
        comm = sum(v for k, v in sh.items() if k not in ("time/compute", "time/bubble"))
        moved = ", ".join(f"{c.name} {fmt_gb(c.bytes_per_step)} GB {'NVL' if c.intra_node else 'IB'}"
                          for c in st.comm.values() if c.degree > 1) or "-"
        rows.append((str(i), f"{st.step_time_s:,.3f}", band_range(st), f"{st.tokens_per_s:,.0f}", f"{st.mfu:.1%}",
                     f"{sh['time/compute']:.1%}", f"{comm:.1%}", f"{sh['time/bubble']:.1%}", moved))
    band = next((st.uncertainty for st in step_list if st.uncertainty is not None), None)
    return Table(("#", "step s", "80% band s", "tokens/s", "MFU", "compute", "exposed comm", "bubble",
                  "bytes per step per GPU, link (NVL inside a node, IB across)"), tuple(rows), align="rrrrrrrrl",
                 note="time model: fitplan.timing.step, its end-to-end constants fitted on published runs "
                      "(docs/calibration.md)" + (f"; band: {band.basis}" if band is not None else ""))


def band_range(st) -> str:
    """'11.6-14.1': the step's 80% band (fitplan.timing.uncertainty), '-' without a fit."""
    b = st.uncertainty
    return "-" if b is None else f"{b.low_s:,.3g}-{b.high_s:,.3g}"


def band_phrase(st) -> str:
    """' (11.6-14.1 s, 80% band over 128 published runs)', or '' without a fit."""
    b = st.uncertainty
    if b is None:
        return ""
    over = f"over {b.runs} published runs" if "published" in b.basis else f"over {b.runs} of your runs"
    return f" ({b.low_s:,.3g}-{b.high_s:,.3g} s, {b.coverage:.0%} band {over})"


def caveat(setup, b) -> str:
    """The risk verdict in one sentence: where the peak is, against which limit, by which rule."""
    r = risk(b)
    lo, hi = r.band_bytes
    where = (f"the peak, {fmt_gib(b.per_gpu_bytes)} GiB at {b.peak.phase} (band {fmt_gib(lo)}-{fmt_gib(hi)} GiB of "
             f"{fmt_gib(b.usable_bytes)} usable)")
    cap = fmt_gib(b.capacity_bytes)
    if r.level == LIKELY_OOM:
        if not b.host_fits:
            return f"Risk: likely_oom. The host memory per node is short ({fmt_gib(b.host_per_node_bytes)} GiB)."
        return (f"Risk: likely_oom. {where[0].upper() + where[1:]}, is over the {fmt_gib(b.usable_bytes)} GiB usable "
                f"(capacity {cap} GiB - reserve {fmt_gib(b.reserve_bytes)} GiB) even at the band's low end.")
    if not b.fits:
        return (f"Risk: tight. {where[0].upper() + where[1:]}, is over the usable memory, but the band's low end is "
                f"within it: it may run, with no margin.")
    if r.level == FITS_WITH_MARGIN:
        return (f"Risk: fits_with_margin. {where[0].upper() + where[1:]}, is {r.fraction:.1%} of the {cap} GiB "
                f"capacity, within Fujii et al.'s 80% (no run below it ran out of memory in their 454).")
    return (f"Risk: tight. {where[0].upper() + where[1:]}, fits the {fmt_gib(b.usable_bytes)} GiB usable but is "
            f"{r.fraction:.1%} of the {cap} GiB capacity, above Fujii et al.'s 80% ({fmt_gib(r.limit_bytes)} GiB), "
            f"under which none of their 454 runs ran out of memory.")


def short(c) -> str:
    """A layout in a few words: 'tp 8 + SP, pp 2, ZeRO-0, selective recompute'."""
    bits = [f"tp {c.tp}" + (" + SP" if c.sequence_parallel else "") if c.tp > 1 else "no tp"]
    bits.append(f"pp {c.pp}" + (f" x {c.virtual_stages} virtual" if c.virtual_stages > 1 else "") if c.pp > 1
                else "no pp")
    bits += [f"{axis} {getattr(c, axis)}" for axis in ("cp", "ep") if getattr(c, axis) > 1]
    bits += [f"dp {c.dp}", f"ZeRO-{int(c.zero)}",
             "no recompute" if c.recompute.value == "none" else f"{c.recompute.value} recompute",
             f"micro-batch {c.micro_batch}"]
    if c.offload.value != "none":
        bits.append(f"offload {c.offload.value}")
    return ", ".join(bits)


TRADE_EPSILON_S = 1e-6   # a part's difference below this is rounding, not a cost


def justify(setup, rec, alt) -> tuple[str, ...]:
    """Why the recommended layout and not the next-fastest safe one: step, memory, each axis's
    exposed communication and link, recompute and bubble, and the trade in one sentence."""
    from fitplan import parts
    timed = steps(setup, [rec, alt])
    if timed is None:
        return (f"against the next layout that fits with margin ({short(alt.config)}): "
                f"{fmt_gib(rec.breakdown.per_gpu_bytes)} vs {fmt_gib(alt.breakdown.per_gpu_bytes)} GiB per GPU; "
                f"no step times to weigh them (the GPU has no peak rate for this recipe's precision)",)
    a, b = timed
    lines = [f"against the next-fastest layout that fits with margin ({short(alt.config)}): step "
             f"{a.step_time_s:,.3f} vs {b.step_time_s:,.3f} s; {fmt_gib(rec.breakdown.per_gpu_bytes)} vs "
             f"{fmt_gib(alt.breakdown.per_gpu_bytes)} GiB per GPU (headroom {fmt_gib(rec.breakdown.headroom_bytes)} "
             f"vs {fmt_gib(alt.breakdown.headroom_bytes)} GiB)"]
    for axis in a.comm:
        x, y = a.comm[axis], b.comm[axis]
        if x.degree > 1 or y.degree > 1:
            lines.append(f"  {axis}: {x.exposed_s:,.3g} s exposed over {_where(x)} vs {y.exposed_s:,.3g} s over "
                         f"{_where(y)}")
    lines.append(f"  recompute {a.hfu / a.mfu - 1:+.1%} vs {b.hfu / b.mfu - 1:+.1%} of the step's FLOPs; bubble "
                 f"{a.bubble_fraction:.1%} vs {b.bubble_fraction:.1%} of the pipelined work")
    diff = {k: a.parts[k] - b.parts[k] for k in a.parts}
    pays, saves = max(diff, key=diff.get), min(diff, key=diff.get)
    if diff[saves] < 0 and diff[pays] > TRADE_EPSILON_S:
        lines.append(f"the trade: {parts.label(pays)} costs {diff[pays]:+,.3g} s here, which buys "
                     f"{-diff[saves]:,.3g} s less {parts.label(saves)} than the alternative")
    elif diff[saves] < 0:   # nothing costs more: no trade to name, only what it saves
        lines.append(f"no trade: no part of the step takes longer here, and {parts.label(saves)} takes "
                     f"{-diff[saves]:,.3g} s less than in the alternative")
    return tuple(lines)


def _where(c) -> str:
    if c.degree <= 1:
        return "no group"
    return f"{c.link} {'inside a node' if c.intra_node else 'across nodes'} ({c.name or c.axis} {c.degree})"
