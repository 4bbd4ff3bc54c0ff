"""Predicted-versus-measured results, and their text and JSON renderings. Pure Python.

A Row compares one measured quantity with the planner's formula plus the named reference
extras: tensors PyTorch stores (or engine behaviour it has) that the paper's formula leaves
out. predicted = planner + sum(extras). Relations:

  "=="   exact: predicted equals measured on every rank; no tolerance
  ">="   bound: measured >= planner (the planner's figure is a lower bound, reason in note)
  "<="   bound: measured <= predicted (the planner's figure is an upper bound, reason in note)
  "~="   within the row's stated tolerance: |measured/predicted - 1| <= tolerance
  "info" reported, not judged (e.g. a CUDA allocator peak, whose gap is what is reported)
"""
from dataclasses import field

from fitplan.record import record

RELATIONS = ("==", ">=", "<=", "~=", "info")


@record(slots=True)
class Extra:
    """A term the reference stores (or runs) beyond the paper's formula: how much, why, and
    where it was measured or read."""
    key: str
    value: int                 # bytes, or FLOPs in a FLOPs row
    reason: str
    cite: str = "docs/engines.md#activations-saved-for-backward"


@record(slots=True, kw_only=True)
class Row:
    section: str                       # "parameters", "activations ...", "distributed ...", "cuda ..."
    quantity: str
    unit: str = "B"                    # "B", "params" or "FLOP"
    planner: int                       # the planner's own formula, for the busiest rank
    measured: int                      # the busiest rank
    extras: tuple[Extra, ...] = ()     # for the busiest rank
    relation: str = "=="
    per_rank_predicted: tuple[int, ...] = ()   # one value per rank (or per layer, see parts_label)
    per_rank_measured: tuple[int, ...] = ()
    parts_label: str = "rank"
    tolerance: float | None = None     # only for "info" rows that state a band; exact rows have none
    note: str = ""

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"row relation must be one of {', '.join(RELATIONS)}, got {self.relation!r}")
        if self.relation == "~=" and self.tolerance is None:
            raise ValueError("a '~=' row states its tolerance")

    @property
    def predicted(self) -> int:
        return self.planner + sum(x.value for x in self.extras)

    @property
    def ratio(self) -> float | None:
        return None if self.predicted == 0 else self.measured / self.predicted

    @property
    def exact(self) -> bool:
        return self.relation == "=="

    @property
    def ok(self) -> bool:
        if self.relation == "==":
            if self.per_rank_predicted or self.per_rank_measured:
                return tuple(self.per_rank_predicted) == tuple(self.per_rank_measured)
            return self.predicted == self.measured
        if self.relation == ">=":
            return self.measured >= self.planner
        if self.relation == "<=":   # the planner's upper bound (with its named extras) covers the measurement
            return self.measured <= self.predicted
        if self.relation == "~=":
            return self.predicted > 0 and abs(self.measured / self.predicted - 1) <= self.tolerance
        return True


@record(slots=True, kw_only=True)
class ValidationReport:
    model: str
    seq_len: int
    micro_batch: int
    device: str
    torch_version: str
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)

    def differences(self) -> tuple[Extra, ...]:
        """Each kind of reference extra once (first occurrence), for the footnotes."""
        seen = {}
        for row in self.rows:
            for extra in row.extras:
                seen.setdefault(extra.key, extra)
        return tuple(seen.values())


def _status(row: Row) -> str:
    mark = "ok" if row.ok else "FAIL"
    return {"==": f"exact {mark}", ">=": f">= {mark}", "<=": f"bound {mark}",
            "~=": f"within {row.tolerance:.0%} {mark}" if row.tolerance is not None else "", "info": "info"}[row.relation]


def _ratio(row: Row) -> str:
    return "-" if row.ratio is None else f"{row.ratio:.4f}"


def render_text(report: ValidationReport) -> str:
    """A table: quantity, planner (paper formula), + extras, predicted, measured, ratio,
    status, footnotes naming the terms that differ from the paper and why."""
    keys = [x.key for x in report.differences()]
    head = ("quantity", "unit", "planner", "+extras", "predicted", "measured", "ratio", "status", "differs")
    lines = []
    for row in report.rows:
        refs = ",".join(str(keys.index(x.key) + 1) for x in row.extras)
        lines.append((row.quantity, row.unit, f"{row.planner:,}", f"{row.predicted - row.planner:+,}",
                      f"{row.predicted:,}", f"{row.measured:,}", _ratio(row), _status(row), refs))
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(len(head))]
    left = (0, 1, 7, 8)   # text columns; the numbers are right-aligned
    fmt = lambda r: "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    out = [f"fitplan validate: {report.model}, s={report.seq_len}, b={report.micro_batch}, device={report.device}, "
           f"torch {report.torch_version}", "", fmt(head), fmt(tuple("-" * w for w in widths))]
    section = None
    for row, cells in zip(report.rows, lines):
        if row.section != section:
            section = row.section
            out.append(f"[{section}]")
        out.append(fmt(cells))
        if row.per_rank_measured and len(set(row.per_rank_measured)) > 1:
            text = f"    per {row.parts_label}: measured {', '.join(f'{v:,}' for v in row.per_rank_measured)}"
            if row.per_rank_predicted:
                text += f"; predicted {', '.join(f'{v:,}' for v in row.per_rank_predicted)}"
            out.append(text)
        if row.note:
            out.append(f"    note: {row.note}")
    if keys:
        out += ["", "Terms that differ from the paper's formula (reference extras):"]
        for i, extra in enumerate(report.differences(), 1):
            out.append(f"  [{i}] {extra.key}: differs from the paper because {extra.reason} ({extra.cite})")
    for note in report.notes:
        out.append(f"note: {note}")
    out.append("")
    out.append("all rows within their stated relation" if report.ok else "SOME ROWS FAILED")
    return "\n".join(out)


def as_json(report: ValidationReport) -> dict:
    """The same rows for `--json`: quantity, predicted, measured, ratio, exact, and more."""
    return {
        "model": report.model, "seq_len": report.seq_len, "micro_batch": report.micro_batch,
        "device": report.device, "torch_version": report.torch_version, "ok": report.ok,
        "rows": [{"section": r.section, "quantity": r.quantity, "unit": r.unit, "planner": r.planner,
                  "predicted": r.predicted, "measured": r.measured, "ratio": r.ratio, "exact": r.exact,
                  "relation": r.relation, "ok": r.ok,
                  "tolerance": r.tolerance, "per_rank_predicted": list(r.per_rank_predicted),
                  "per_rank_measured": list(r.per_rank_measured), "parts_label": r.parts_label, "note": r.note,
                  "extras": [{"key": x.key, "value": x.value, "reason": x.reason, "cite": x.cite}
                             for x in r.extras]} for r in report.rows],
        "notes": list(report.notes),
    }
