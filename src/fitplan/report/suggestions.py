"""The search's report (--suggest): the ranked layouts, the recommendation with its
justification, and the proof when nothing fits."""
from fitplan.report.header import config_line, header
from fitplan.report.render import Heading, Lines, Table
from fitplan.report.sentences import inequality
from fitplan.units import fmt_gib


def search(setup, r, bound, smallest) -> list:
    blocks = header(setup) + [
        Heading(f"Search over {r.considered:,} candidates on {r.num_gpus} GPUs: "
                f"{r.considered - r.fit:,} rejected, {r.fit:,} fit"),
        Lines(("rejected, by the first rule broken: " + "; ".join(f"{k} {v:,}" for k, v in r.rejected_by_reason.items()),)),
        Heading("Lower bound, for every configuration  [docs/formulas.md#lower-bound]"),
        Lines((inequality(bound),
               f"so N >= {bound.min_gpus} GPUs in general, {bound.min_gpus_power_of_two} as a power of two")),
    ]
    if not r.feasible:
        if bound.excludes:
            why = (f"Nothing fits on {_gpus(r.num_gpus)}, whatever the ZeRO stage, tp, pp, cp, sequence parallel or "
                   f"recompute mode: sharding only partitions the bytes, and even their average exceeds the usable "
                   f"memory.")
        else:
            why = (f"Nothing fits on {_gpus(r.num_gpus)}: the bound allows this count, but every legal candidate "
                   f"exceeds memory or breaks a rule (counts above).")
        lines = [why]
        if r.least_loaded is not None:
            lines.append(f"least loaded: {config_line(r.least_loaded.config)} needs "
                         f"{fmt_gib(r.least_loaded.per_gpu_bytes)} GiB")
        if smallest:
            def found(n):
                return str(n) if n else f"none up to {smallest['searched_up_to']}"
            lines.append(f"smallest GPU count where the search finds a fit: {found(smallest['general'])} "
                         f"(power of two: {found(smallest['power_of_two'])})")
        return blocks + [Heading("Verdict"), Lines(tuple(lines))]
    rows = tuple((str(i), str(c.dp), str(c.tp), str(c.pp), str(c.cp), str(c.ep), str(int(c.zero)),
                  "on" if c.sequence_parallel else "off", c.recompute.value, str(c.micro_batch),
                  str(s.exact.largest_micro_batch or "-"), str(c.virtual_stages),
                  fmt_gib(s.breakdown.per_gpu_bytes), fmt_gib(s.breakdown.headroom_bytes), s.rank_reason)
                 for i, s in enumerate(r.suggestions, 1) for c in [s.config])
    first = ("shortest step first" if r.rank_order.startswith("estimated step") else
             "lowest cost to train first" if r.rank_order.startswith("estimated cost") else "least disturbance first")
    blocks += [Heading(f"Configurations that fit, {first}"), Lines((f"ranked by {r.rank_order}",)),
               Table(("#", "dp", "tp", "pp", "cp", "ep", "zero", "sp", "recompute", "mb", "max mb", "v", "per-GPU GiB",
                      "headroom GiB", "why this rank"), rows, align="rrrrrrrlrrrrrrl",
                     note="max mb: the largest micro-batch that layout fits with, all else kept, among those the global "
                          "batch divides into")]
    from fitplan.report.advice import step_times, time_table   # loaded only when something fits
    step_list, shown = step_times(setup, r.suggestions, lambda sl: [time_table(r.suggestions, sl)])
    blocks += [Heading("Estimated step time of each"), *shown]
    if setup.training.train_tokens is not None:   # the time-to-train lines are loaded only when asked for
        from fitplan.report.to_train import to_train_table
        blocks += to_train_table(setup, [f"#{i}" for i in range(1, len(r.suggestions) + 1)],
                                 step_list or [None] * len(r.suggestions))
    return blocks + recommendation(setup, r)


def _gpus(n: int) -> str:
    return f"{n:,} GPU" + ("" if n == 1 else "s")


def recommendation(setup, r) -> list:
    """(e) the minimum viable layout and (f) the one to run, each with its memory and time, and
    (f) justified against the next-fastest safe alternative."""
    from fitplan.report.advice import caveat, justify, short, steps
    from fitplan.search import RECOMMEND_ORDER
    mv, rec = r.minimum_viable, r.recommended
    out = []
    if mv is not None:
        out += [Heading("Minimum viable: the least disturbance from plain data parallelism"),
                Lines((short(mv.config), *_memory_and_time(setup, mv, steps), caveat(setup, mv.breakdown)))]
    lines = [f"chosen as {RECOMMEND_ORDER}"]
    if rec is None:
        lines.append(f"nothing to recommend: {r.recommend_note}")
    else:
        lines += [short(rec.config) + ("  (the minimum viable layout too)" if mv is not None and
                                       rec.config == mv.config else ""), *_memory_and_time(setup, rec, steps)]
        if r.recommend_note:
            lines.append(r.recommend_note)
        if r.alternatives:
            lines += justify(setup, rec, r.alternatives[0])
        else:
            lines.append("no other layout fits with margin")
        lines.append(caveat(setup, rec.breakdown))
    return out + [Heading("Recommended: the one to run"), Lines(tuple(lines))]


def _memory_and_time(setup, s, steps) -> tuple[str, ...]:
    b = s.breakdown
    memory = (f"{fmt_gib(b.per_gpu_bytes)} GiB per GPU, {fmt_gib(b.headroom_bytes)} GiB headroom; "
              f"recompute needed: {s.config.recompute.value}; largest micro-batch that fits: "
              f"{s.exact.largest_micro_batch or '-'}")
    st = (steps(setup, [s]) or [None])[0]
    if st is None:
        return memory, "no step time: the GPU has no peak rate for this recipe's precision"
    run = ()
    if setup.training.train_tokens is not None:
        from fitplan.report.to_train import to_train_line
        run = (to_train_line(setup, st),)
    from fitplan.report.advice import band_phrase
    return memory, (f"{st.step_time_s:,.3f} s per step{band_phrase(st)}, {st.tokens_per_s:,.0f} tokens/s, MFU {st.mfu:.1%} "
                    f"({st.mfu_causal:.1%} causal); {st.num_microbatches} micro-batches per step"), *run
