"""`fitplan sweep`: the least per-GPU memory over GPU counts, sequence lengths or micro-batches,
as a text table or JSON (fitplan.sweep.SweepAnswer): the smallest GPU count that fits, or the
largest sequence length or micro-batch (`largest_fitting`)."""

from fitplan.report.jsonout import dump
from fitplan.report.render import Lines, Table
from fitplan.units import fmt_gib


def as_json(a) -> str:
    usable = a.usable_bytes
    best_key = "smallest_fitting" if a.over == "gpus" else "largest_fitting"
    return dump({"over": a.over, "usable_bytes_per_gpu": usable,
                       "points": [{"x": p.x, "per_gpu_bytes": p.per_gpu_bytes, "fits": p.fits(usable)}
                                  for p in a.points],
                       best_key: a.best})


def _config(b) -> str:
    if b is None:
        return ""
    c = b.config
    return f"tp={c.tp} pp={c.pp} cp={c.cp} zero={int(c.zero)} recompute={c.recompute.value}"


def blocks(a) -> list:
    usable = a.usable_bytes
    rows = tuple((str(p.x), "-" if p.per_gpu_bytes is None else fmt_gib(p.per_gpu_bytes),
                  "yes" if p.fits(usable) else "no", _config(p.least)) for p in a.points)
    label = {"gpus": "GPUs", "seq-len": "seq len", "micro-batch": "micro-batch"}[a.over]
    key, what = (("smallest_fitting", "the smallest GPU count that fits") if a.over == "gpus" else
                 ("largest_fitting", f"the largest {label} that fits"))
    answer = f"{key}: {a.best} ({what})" if a.best is not None else f"{key}: none (none of these fits)"
    return [Table((label, "per-GPU GiB", "fits", "least-loaded configuration"), rows, align="rrll",
                  note=f"usable {fmt_gib(usable)} GiB per GPU"), Lines((answer,))]
