"""The recommendation's justification and the time columns, from the core's numbers.

Everything here is wording over fitplan.timing.step.evaluate_step and the memory
breakdowns; no formula lives here.
"""
from fitplan.analysis import largest_unmodelled
from fitplan.errors import SpecError
from fitplan.report.render import Table
from fitplan.units import fmt_gb, fmt_gib

UNMODELLED = {
    "buffers/zero3_gather": "ZeRO-3's gathered-layer buffers (DeepSpeed budgets 4 B x the largest layer's parameters)",
    "buffers/logits_grad": "the fp32 logits' gradient in the cross-entropy backward",
    "buffers/p2p": "pipeline send/receive buffers",
}


def steps(setup, suggestions):
    """evaluate_step for each suggestion (or breakdown), or None when the GPU cannot run the
    recipe's precision."""
    from fitplan.timing.step import evaluate_step
    try:
        return [evaluate_step(setup, s.config) for s in suggestions]
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
        rows.append((str(i), f"{st.step_time_s:,.3f}", f"{st.tokens_per_s:,.0f}", f"{st.mfu:.1%}",
                     f"{sh['time/compute']:.1%}", f"{comm:.1%}", f"{sh['time/bubble']:.1%}", moved))
    return Table(("#", "step s", "tokens/s", "MFU", "compute", "exposed comm", "bubble",
                  "bytes per step per GPU, link (NVL inside a node, IB across)"), tuple(rows), align="rrrrrrrl",
                 note="time model: fitplan.timing.step; efficiency is the GPU preset's, a visible assumption")


def _layout(c) -> tuple:
    return (c.recompute, c.zero, c.tp, c.pp, c.cp, c.sequence_parallel)


def advice(setup, result, step_list) -> tuple[str, ...]:
    """Why #1, against the next-cheapest alternative of a different layout."""
    best = result.ranked[0]
    alt_i = next((i for i, s in enumerate(result.ranked) if _layout(s.config) != _layout(best.config)), None)
    lines = []
    st = step_list[0] if step_list else None
    if st is not None:
        extra = st.hfu / st.mfu - 1
        cost = ("" if best.config.recompute.value == "none" else
                f"; {best.config.recompute.value} recompute adds {extra:+.1%} to the step's FLOPs "
                f"({3 * extra:+.1%} of the forward, the way Korthikanti et al. quote it)")
        lines.append(f"time: {st.step_time_s:,.3f} s per step, {st.tokens_per_s:,.0f} tokens/s, "
                     f"MFU {st.mfu:.1%}{cost}")
        lines.append(f"links: {_links(st)}")
    if alt_i is not None:
        alt = result.ranked[alt_i]
        a, b = best.breakdown, alt.breakdown
        line = (f"against the next-cheapest different layout (rank {alt_i + 1}: {alt.rank_reason}): "
                f"{fmt_gib(a.per_gpu_bytes)} vs {fmt_gib(b.per_gpu_bytes)} GiB per GPU, "
                f"headroom {fmt_gib(a.headroom_bytes)} vs {fmt_gib(b.headroom_bytes)} GiB")
        alt_steps = steps(setup, [alt]) if st is not None else None
        if alt_steps:
            t = alt_steps[0]
            line += (f"; step {st.step_time_s:,.3f} vs {t.step_time_s:,.3f} s; recompute FLOPs "
                     f"{st.hfu / st.mfu - 1:+.1%} vs {t.hfu / t.mfu - 1:+.1%}")
        lines.append(line)
    else:
        lines.append("no other layout fits: every other fitting candidate differs only in interleaving or micro-batch")
    lines.append(caveat(setup, best.breakdown))
    return tuple(lines)


def caveat(setup, b) -> str:
    """One sentence on what the analytic total leaves out that matters most for this answer."""
    gib = lambda x: f"{fmt_gib(x)} GiB"
    term = largest_unmodelled(setup, b)
    size, what = (term.value, UNMODELLED[term.key]) if term else (0, "")
    if size > b.headroom_bytes:
        return (f"Not modelled: {what}, about {gib(size)}, more than the {gib(b.headroom_bytes)} headroom; "
                f"check it on the real engine or pick a configuration with more headroom.")
    if b.headroom_bytes < 0.05 * b.usable_bytes:
        return (f"Headroom is only {gib(b.headroom_bytes)} ({b.headroom_bytes / b.usable_bytes:.1%} of usable): "
                f"allocator fragmentation beyond the {gib(b.reserve_bytes)} reserve can take that (ZeRO Sec. 3.5 "
                f"reports out-of-memory errors with over 30% free in extreme cases).")
    if what:
        return (f"Not modelled: {what}, about {gib(size)}, within the {gib(b.headroom_bytes)} headroom; NCCL "
                f"buffers and the CUDA context are assumed inside the {gib(b.reserve_bytes)} reserve.")
    return f"NCCL buffers and the CUDA context are assumed to fit inside the {gib(b.reserve_bytes)} reserve."
