"""Pictures of per-GPU memory, written as PNG files with matplotlib's Agg backend.

  plot_breakdowns  one stacked bar per configuration: the busiest GPU's bytes by term
                   (fitplan.memory.breakdown.PARTS), against the usable-memory line; labels and
                   colours from the table of parts, fitplan.parts; each bar named by its label
                   and its layout ("#1" over "tp8 pp2 sp selective")
  plot_sweep       per-GPU memory against GPU count (or sequence length), with the
                   usable-memory line and the smallest (or largest) x that fits marked
  plot_timeline    one rank's memory over the step (fitplan.memory.events): every forward
                   and backward of its schedule and the optimizer step, stacked by group, with
                   the usable, 80%-of-capacity and capacity lines and the peak marked

matplotlib is imported inside the functions, so `import fitplan` never needs it (install
it with `pip install matplotlib`). Memory is drawn in GiB (2**30 bytes), one unit for the
whole figure.
"""
from __future__ import annotations

import io
from pathlib import Path

from fitplan.memory.breakdown import PARTS
from fitplan import parts
from fitplan.report.sentences import layout_words
from fitplan.units import to_gib

DPI = 100


def _pyplot():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def bar_labels(breakdowns, labels) -> list[str]:
    """Each bar's label over its layout, e.g. "#1" over "tp8 pp2 sp selective"."""
    return [label if label == layout_words(b.config) else f"{label}\n{layout_words(b.config)}"
            for b, label in zip(breakdowns, labels)]


def plot_breakdowns(breakdowns, labels, path, *, title: str = "Per-GPU memory of the busiest GPU") -> Path:
    """Stacked bars, one per Breakdown, segments in PARTS order: the terms held at the step's
    peak (fitplan.memory.timeline), so each bar's height is its per-GPU peak; terms that are
    zero in every bar are left out of the legend. Bars over the usable line are marked; each bar is
    named by its label and its layout (bar_labels)."""
    if len(breakdowns) != len(labels):
        raise ValueError(f"{len(breakdowns)} breakdowns but {len(labels)} labels")
    if not breakdowns:
        raise ValueError("nothing to plot: no breakdowns")
    plt = _pyplot()
    held = [b.peak.held for b in breakdowns]   # what each GPU holds at its peak: the bar's total is the peak
    keys = [k for k in PARTS if any(h.get(k) for h in held)]
    width = max(7.0, 1.3 * len(breakdowns) + 4.5)
    fig, ax = plt.subplots(figsize=(width, 5.5), dpi=DPI)
    xs = range(len(breakdowns))
    bottoms = [0.0] * len(breakdowns)
    for key in keys:
        heights = [to_gib(h.get(key, 0)) for h in held]
        ax.bar(xs, heights, 0.6, bottom=bottoms, color=parts.color(key), label=parts.label(key), edgecolor="white",
               linewidth=0.5)
        bottoms = [lo + h for lo, h in zip(bottoms, heights)]
    usable = {b.usable_bytes for b in breakdowns}
    line_top = to_gib(max(usable))
    # A bar far over the line would flatten the others: cut the axis at twice the line and
    # write the off-scale totals at the top instead.
    clipped = max(bottoms) > 2.5 * line_top
    top = 2 * line_top if clipped else max(max(bottoms), line_top) * 1.15
    for b_i, b in enumerate(breakdowns):
        total = to_gib(b.per_gpu_bytes)
        text = f"{total:.1f}" + ("" if b.fits else "\nover")
        color = "black" if b.fits else "#b30000"
        if total > top:
            ax.annotate(f"{total:.1f}\nover, off scale", (b_i, top), ha="center", va="top", fontsize=9, color=color,
                        xytext=(0, -4), textcoords="offset points",
                        bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor=color))
        else:
            ax.annotate(text, (b_i, total), ha="center", va="bottom", fontsize=9, color=color, xytext=(0, 3),
                        textcoords="offset points")
        if len(usable) > 1:
            ax.hlines(to_gib(b.usable_bytes), b_i - 0.4, b_i + 0.4, colors="black", linestyles="--")
    if len(usable) == 1:
        ax.axhline(line_top, color="black", linestyle="--", linewidth=1.2,
                   label=f"usable memory ({line_top:.1f} GiB)")
    capacities = {b.capacity_bytes for b in breakdowns}
    if len(capacities) == 1 and capacities != {0}:   # the risk rule's line (fitplan.analysis.risk)
        margin = to_gib(min(capacities.pop() * 4 // 5, max(usable)))
        ax.axhline(margin, color="#31a354", linestyle=":", linewidth=1.2,
                   label=f"fits with margin below ({margin:.1f} GiB, 80% of capacity)")
    many = len(breakdowns) > 4
    ax.set_xticks(list(xs), bar_labels(breakdowns, labels), rotation=15 if many else 0,
                  ha="right" if many else "center", multialignment="center", fontsize=9)
    ax.set_ylabel("GiB per GPU")
    ax.set_title(title)
    ax.set_ylim(0, top)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    handles, names = ax.get_legend_handles_labels()
    order = [i for i, n in enumerate(names) if n.startswith("usable")] + \
            [i for i, n in enumerate(names) if not n.startswith("usable")][::-1]   # legend top = stack top
    ax.legend([handles[i] for i in order], [names[i] for i in order], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _save(fig, plt, path)


def fitting_x(points, capacity_bytes: int, *, mark: str = "smallest"):
    """The smallest (or largest) x whose per-GPU bytes fit the capacity; None if none do.
    Points with bytes None (nothing valid at that x) never fit."""
    if mark not in ("smallest", "largest"):
        raise ValueError(f"mark must be 'smallest' or 'largest', got {mark!r}")
    fits = [x for x, used in points if used is not None and used <= capacity_bytes]
    if not fits:
        return None
    return min(fits) if mark == "smallest" else max(fits)


def sweep_title(model: str, gpu: str, *, num_gpus: int | None = None) -> str:
    """The sweep chart's title names what was swept: the model and the GPU (and the GPU count
    when the sweep is over sequence length)."""
    on = f"{num_gpus} x {gpu}" if num_gpus else f"{gpu} GPUs"
    return f"{model} on {on}: least per-GPU memory of any configuration"


def plot_sweep(points, usable_bytes: int, path, xlabel: str, *, mark: str = "smallest",
               title: str = "Least per-GPU memory of any configuration") -> Path:
    """points: (x, per-GPU bytes or None) pairs, e.g. GPU count -> bytes of the best plan.
    A log2 x axis when x spans a factor of 16 or more (GPU counts); the x marked is
    fitting_x(points, usable_bytes, mark=mark). Name the model and GPU in the title
    (sweep_title)."""
    points = sorted(points)
    if not points:
        raise ValueError("nothing to plot: no points")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.0, 5.0), dpi=DPI)
    shown = [(x, to_gib(used)) for x, used in points if used is not None]
    usable = to_gib(usable_bytes)
    if shown:
        ax.plot([x for x, _ in shown], [y for _, y in shown], marker="o", color="#08519c",
                label="per-GPU memory")
        over = [(x, y) for x, y in shown if y > usable]
        if over:
            ax.scatter([x for x, _ in over], [y for _, y in over], color="#b30000", zorder=3,
                       label="does not fit")
    missing = [x for x, used in points if used is None]
    ax.axhline(usable, color="black", linestyle="--", linewidth=1.2, label=f"usable memory ({usable:.1f} GiB)")
    best = fitting_x(points, usable_bytes, mark=mark)
    if best is not None:
        y = to_gib(dict(points)[best])
        ax.axvline(best, color="#31a354", linestyle=":", linewidth=1.2)
        ax.scatter([best], [y], s=160, facecolors="none", edgecolors="#31a354", linewidths=2, zorder=4,
                   label=f"{mark} that fits: {best:g}")
        ax.annotate(f"{best:g}", (best, y), xytext=(-12, -20), textcoords="offset points", color="#31a354", ha="right",
                    fontweight="bold")
    xs = [x for x, _ in points]
    if min(xs) > 0 and max(xs) / min(xs) >= 16:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ys = [usable] + [y for _, y in shown]
    if min(ys) > 0 and max(ys) / min(ys) >= 16:
        # memory that halves with each doubling: a log axis keeps the points near the line apart
        from matplotlib.ticker import FuncFormatter
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_ylim(min(ys) / 1.5, max(ys) * 1.5)
    else:
        ax.set_ylim(0, max(ys) * 1.15)
    lo, hi = min(xs), max(xs)
    if ax.get_xscale() == "log":
        ax.set_xlim(lo / 1.3, hi * 1.3)
    else:
        pad = 0.05 * (hi - lo) if hi > lo else 1
        ax.set_xlim(lo - pad, hi + pad)
    for x in missing:
        ax.annotate("none valid", (x, 0.03), xycoords=("data", "axes fraction"), ha="center", fontsize=8,
                    color="#636363")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("GiB per GPU")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    return _save(fig, plt, path)


GROUP_COLORS = {"states": "#3182bd", "runtime": "#31a354", "activations": "#e6550d"}


def plot_timeline(events, path, *, usable_bytes: int, capacity_bytes: int, margin_bytes: int,
                  title: str = "Memory over the step") -> Path:
    """Stacked steps, one per event (fitplan.memory.events.Event), by group (states, runtime
    buffers, activations); a steady-state pair shown once is labelled with its count. Lines:
    usable memory, the 80%-of-capacity margin (Fujii et al.) and the capacity."""
    if not events:
        raise ValueError("nothing to plot: no events")
    from fitplan.memory.events import GROUPS
    plt = _pyplot()
    n = len(events)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.32 * n + 4.0), 5.5), dpi=DPI)
    xs = list(range(n))
    bottoms = [0.0] * n
    for group in GROUPS:
        heights = [to_gib(e.by_group()[group]) for e in events]
        ax.bar(xs, heights, 0.85, bottom=bottoms, color=GROUP_COLORS[group], label=group, edgecolor="white",
               linewidth=0.3)
        bottoms = [lo + h for lo, h in zip(bottoms, heights)]
    for value, style, text in ((capacity_bytes, "-", "capacity"), (usable_bytes, "--", "usable"),
                               (margin_bytes, ":", "80% of capacity (Fujii et al.)")):
        ax.axhline(to_gib(value), color="black", linestyle=style, linewidth=1.0,
                   label=f"{text} ({to_gib(value):.1f} GiB)")
    top = max(range(n), key=lambda i: events[i].bytes)
    ax.annotate(f"peak {to_gib(events[top].bytes):.1f} GiB\n{events[top].phase}", (top, to_gib(events[top].bytes)),
                xytext=(0, 12), textcoords="offset points", ha="center", fontsize=8, color="#b30000",
                arrowprops=dict(arrowstyle="-", color="#b30000"))
    labels = [e.phase.replace("micro-batch ", "mb ").replace("forward of", "F").replace("backward of", "B")
              + (f" x{e.repeat:,}" if e.repeat > 1 else "") for e in events]
    ax.set_xticks(xs, labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("GiB on this GPU")
    ax.set_ylim(0, max(to_gib(capacity_bytes), max(bottoms)) * 1.15)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return _save(fig, plt, path)


def _save(fig, plt, path) -> Path:
    """Render to memory, then write all or nothing (fitplan.files.write)."""
    from fitplan.files.write import write_file
    path = Path(path)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    write_file(path, png.getvalue())
    return path
