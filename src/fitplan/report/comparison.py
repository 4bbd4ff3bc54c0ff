"""`fitplan compare`: pure TP, pure PP and hybrids side by side."""
from fitplan import presets
from fitplan.report.header import header
from fitplan.report.render import Heading, Lines, Table
from fitplan.report.sentences import PATTERN, monitor, reasons
from fitplan.units import fmt_gb, fmt_gib, fmt_ms


def compare(setup, cmp) -> list:
    rows, comm_rows = [], []
    for l in cmp.layouts:
        c = l.config
        if l.problem:
            rows.append((l.name, f"{c.tp}/{c.pp}/{c.dp}", "-", "-", "-", "-", "-", "cannot be built: " + l.problem))
            continue
        stored = " / ".join(fmt_gib(b) for _, b in l.stored_by_recompute)
        st = l.step
        rows.append((l.name, f"{c.tp}/{c.pp}/{c.dp}", fmt_gib(l.simplified_state_bytes), fmt_gib(l.state_bytes), stored,
                     c.recompute.value, fmt_gib(l.memory.per_gpu_bytes),
                     ("fits" if l.fits else "does not fit") + f"; step {st.step_time_s:,.3f} s, MFU {st.mfu:.1%}, "
                     f"bubble {st.bubble_fraction:.1%}"))
        for axis, ac in st.comm.items():
            if ac.degree > 1:
                comm_rows.append((l.name, ac.name, str(ac.degree), PATTERN[axis], fmt_gb(ac.bytes_per_step),
                                  ("inside a node, " if ac.intra_node else "across nodes, ") + ac.link,
                                  f"{ac.exposed_s:,.3g}"))
    simple = presets.recipe("exercise-10")   # fitplan.compare's simplified budget
    budget = f"{simple.total_bytes:g} B/param"
    blocks = header(setup) + [
        Heading("Pure tensor parallel, pure pipeline parallel and a hybrid"),
        Table(("layout", "tp/pp/dp", f"{budget} GiB", "full state GiB", "activations none / selective / full GiB",
               "recompute", "per-GPU GiB", "verdict"), tuple(rows), align="llrrrlrl",
              note=f"per busiest GPU; {budget} is bf16 weights + 8 B of Adam moments, no gradients or master copy: "
                   f"the exercise's simplified budget (recipe {simple.name}); the full state uses "
                   f"{setup.training.recipe.name}; the recompute column is the least that fits"),
        Heading("Communication per step, per GPU"),
        Table(("layout", "axis", "degree", "pattern", "GB/step", "link", "exposed s"), tuple(comm_rows),
              align="llrlrlr") if comm_rows else Lines(("no communication",)),
        Heading("Proposal"), Lines(reasons(cmp) or ("nothing fits on these GPUs",)),
    ]
    if cmp.monitor:
        blocks += [Heading(f"What to monitor on the {cmp.preferred.name} run (pipeline-stage synchronisation)"),
                   Table(("metric", "expected", "what it catches"),
                         tuple((m, f"{fmt_ms(v)} ms" if unit == "s" else f"{v:g} {unit}", why)
                               for m, v, unit, why in monitor(cmp)), align="lrl")]
    return blocks
