"""Reports are lists of blocks; one renderer each for plain text and markdown.

Text tables size their columns from their content (deterministic: no terminal sniffing),
so golden files are stable.
"""
from dataclasses import field

from fitplan.record import record


@record
class Heading:
    text: str


@record
class Lines:
    lines: tuple[str, ...]


@record
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: str = ""                 # one 'l' or 'r' per column; default: first left, rest right
    note: str = ""


@record
class Bullets:
    title: str
    items: tuple[str, ...] = field(default_factory=tuple)


def _align(table: Table) -> str:
    return table.align or "l" + "r" * (len(table.header) - 1)


def render_text(blocks) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out += ["", block.text]
        elif isinstance(block, Lines):
            out += [f"  {line}" if line else "" for line in block.lines]
        elif isinstance(block, Bullets):
            out += ["", block.title] + [f"  - {item}" for item in block.items]
        elif isinstance(block, Table):
            cols = list(zip(block.header, *block.rows))
            widths = [max(len(c) for c in col) for col in cols]
            fmt = lambda row: "  " + "  ".join(c.ljust(w) if a == "l" else c.rjust(w)
                                                for c, w, a in zip(row, widths, _align(block))).rstrip()
            out += [fmt(block.header)] + [fmt(r) for r in block.rows]
            if block.note:
                out.append(f"  ({block.note})")
    return "\n".join(out).lstrip("\n") + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(blocks) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out += ["", f"## {block.text}", ""]
        elif isinstance(block, Lines):
            out += [f"    {line}" if line else "" for line in block.lines] + [""]
        elif isinstance(block, Bullets):
            out += ["", f"**{block.title}**", ""] + [f"- {item}" for item in block.items] + [""]
        elif isinstance(block, Table):
            out.append("| " + " | ".join(_md_cell(h) for h in block.header) + " |")
            out.append("|" + "|".join("---:" if a == "r" else "---" for a in _align(block)) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            if block.note:
                out += ["", f"_{block.note}_"]
            out.append("")
    return "\n".join(out).strip("\n") + "\n"
