"""Output cites only what a user can open: no private notes, and every docs/ citation lands.

A citation is "docs/<file>.md#<anchor>" or the short "<file>.md#<anchor>" that Cite("fitplan",
...) uses; both name a file under docs/. The anchor must be the GitHub anchor of one of that
file's headings: lowercased, punctuation other than '-' and '_' dropped, spaces turned into
'-', and "-1", "-2", ... appended to repeated headings.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CITATION = re.compile(r"(?<![\w/.-])(docs/)?([\w-]+)\.md#([\w-]+)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def source_files(top: Path):
    for path in sorted(top.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path


def github_anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found, seen, fenced = set(), {}, False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = github_anchor(match.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def citations(top: Path):
    for path in source_files(top):
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for match in CITATION.finditer(line):
                yield f"{path.relative_to(ROOT)}:{number}", match.group(2) + ".md", match.group(3)


def test_github_anchor_rule():
    assert github_anchor("Hugging Face config.json fields") == "hugging-face-configjson-fields"
    assert github_anchor("ZeRO-1, FSDP1 and FSDP2") == "zero-1-fsdp1-and-fsdp2"
    assert github_anchor("lower-bound") == "lower-bound"
    assert anchors("# A\n## b\n```\n# not a heading\n```\n## b\n") == {"a", "b", "b-1"}


@pytest.mark.parametrize("top", ["src", "docs", "README.md"])
def test_no_private_notes_cited(top):
    """ENGINE-NOTES is a developers' file users do not have (docs/engines.md holds its facts)."""
    path = ROOT / top
    files = [path] if path.is_file() else list(source_files(path))
    assert files
    offenders = [str(f.relative_to(ROOT)) for f in files
                 if b"ENGINE-NOTES" in f.read_bytes()]
    assert offenders == []


@pytest.mark.parametrize("top", ["src", "docs"])
def test_docs_citations_resolve(top):
    found = list(citations(ROOT / top))
    if top == "src":
        assert {name for _, name, _ in found} >= {"formulas.md", "engines.md"}
    known = {}
    broken = []
    for where, name, anchor in found:
        if name not in known:
            file = DOCS / name
            known[name] = anchors(file.read_text(encoding="utf-8")) if file.is_file() else None
        if known[name] is None:
            broken.append(f"{where}: docs/{name} does not exist")
        elif anchor not in known[name]:
            broken.append(f"{where}: docs/{name} has no heading with anchor #{anchor}")
    assert broken == []


def test_readme_names_each_presets_default_gpu():
    """Where the README introduces the presets it says which GPU each plans for without --gpu;
    the sentence must stay true of fitplan.presets."""
    from fitplan import presets
    readme = " ".join((ROOT / "README.md").read_text().split())
    by_gpu = {}
    for name, p in presets.MODELS.items():
        by_gpu.setdefault(p.gpu, []).append(name)
    assert by_gpu == {"gpu-192gib": ["gpt3-175b"], "a100-80gb": ["bloom-176b"],
                      "h100-80gb": sorted(set(presets.MODELS) - {"gpt3-175b", "bloom-176b"},
                                          key=list(presets.MODELS).index)}
    assert ("`gpt3-175b` defaults to `gpu-192gib`, the exercise's 192 GiB part (10 GiB reserved, 8 per node), "
            "`bloom-176b` to `a100-80gb` (what BLOOM trained on), and every other preset to `h100-80gb`") in readme
    g = presets.GPUS["gpu-192gib"]
    assert (g.memory_bytes, g.default_reserve_bytes, g.gpus_per_node) == (192 * 2**30, 10 * 2**30, 8)
