"""Fuzz the file inputs: random, mutated and truncated spec files (TOML, JSON) and HF
config.json files end in exit 0/1 with an answer, or exit 2 with one line naming the
problem. Never a traceback."""
import io
import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitplan import presets
from fitplan.cli import main
from fitplan.presets import by_name as preset_object
from fitplan.files.load import dump_toml

ROOT = Path(__file__).resolve().parents[2]
HF = {p.parent.name: json.loads(p.read_text()) for p in (ROOT / "examples" / "hf").glob("*/config.json")}
SPEC_TEXTS = [dump_toml(*preset_object(n)) for n in ("gpt3-125m", "llama3.1-8b")] + \
             [dump_toml(presets.gpu("h100-80gb")), (ROOT / "examples/specs/llama3.1-8b-64xh100.toml").read_text()]
SCALE = int(os.environ.get("FITPLAN_FUZZ_EXAMPLES", "3000")) / 3000   # bench/fuzz.py raises it
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                 st.text(max_size=8), st.just("80 GiB"), st.just("1e400 GB"), st.just("-1 GiB"),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


@st.composite
def mutated(draw, base: dict):
    doc = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 4))):
        keys = list(doc)
        action = draw(st.sampled_from(["drop", "junk", "extra", "nest"]))
        if action == "drop" and keys:
            doc.pop(draw(st.sampled_from(keys)))
        elif action == "junk" and keys:
            doc[draw(st.sampled_from(keys))] = draw(JUNK)
        elif action == "extra":
            doc[draw(st.text(min_size=1, max_size=10))] = draw(JUNK)
        else:
            doc = {"nested": doc} if draw(st.booleans()) else [doc]
            break
    return doc


def run_file(suffix: str, text: str, argv_for) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"config{suffix}"
        path.write_text(text)
        out, err = io.StringIO(), io.StringIO()
        code = main(argv_for(path), out=out, err=err)
    assert code in (0, 1, 2)
    if code == 2:
        assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("fitplan: "), err.getvalue()
    else:
        assert out.getvalue()


@settings(max_examples=int(600 * SCALE), suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(HF)).flatmap(lambda name: mutated(HF[name])))
def test_hf_configs(doc):
    run_file(".json", json.dumps(doc), lambda p: ["plan", "--hf-config", str(p), "--seq-len", "1024", "--gpus", "8"])


@settings(max_examples=int(600 * SCALE), suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SPEC_TEXTS), st.data())
def test_truncated_and_edited_spec_files(text, data):
    cut = data.draw(st.integers(0, len(text)))
    edit = data.draw(st.sampled_from(["truncate", "replace", "insert"]))
    if edit == "truncate":
        text = text[:cut]
    elif edit == "replace":
        text = text[:cut] + data.draw(st.text(max_size=6)) + text[cut + 6:]
    else:
        text = text[:cut] + data.draw(st.sampled_from(["]", "[", "=", '"', "\n[model]\n", "x = 1\n", "\x00"])) + text[cut:]
    run_file(".toml", text, lambda p: ["plan", "--spec", str(p), "--gpus", "8", "--seq-len", "1024"])


@settings(max_examples=int(400 * SCALE), suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SPEC_TEXTS), st.data())
def test_json_spec_documents(text, data):
    import tomllib
    doc = tomllib.loads(text)
    table = data.draw(st.sampled_from(sorted(doc)))
    doc[table] = data.draw(mutated(doc[table])) if isinstance(doc[table], dict) else doc[table]
    run_file(".json", json.dumps(doc), lambda p: ["plan", "--spec", str(p), "--gpus", "8", "--seq-len", "1024"])
