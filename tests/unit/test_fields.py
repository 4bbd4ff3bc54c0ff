"""Every declared field round-trips through a spec file, the CLI flags and the JSON API.

The declarations (fitplan.specs.declare, fitplan.request) are the one place a field is
described; the CLI's flags, the spec-file reader/writer and the API's schema are generated
from them. This walks every declared field:
  - spec fields (model, training, cluster and their nested tables): set by its flag to its
    declared example, by the API to the same value, they give the same Setup, the field
    holds the example (read as its kind says: "96 GiB" -> bytes), and that Setup written as
    a spec file (dump_toml) loads back equal, also through `--spec`;
  - configuration fields: the CLI and the API give the same ParallelConfig holding the value
    (a spec file holds no configuration);
  - every other request field (search, sweep, export options): the CLI and the API build the
    same Request values.
"""
import dataclasses
from functools import reduce

import pytest

from fitplan import presets
from fitplan.cli import build_parser, request_from_args
from fitplan.errors import SpecError
from fitplan.files.load import dump_toml, load_specs
from fitplan.request import Request, api_flags, command_flags
from fitplan.resolve import config_of, resolve, typed
from fitplan.specs import ClusterSpec, ModelSpec, TrainingSpec
from fitplan.specs.declare import decl_of, enum_value, spec_fields
from fitplan.web.schema import build_request

# Bases tried in order: the first where the example changes the field and everything resolves.
BASES = ("gpt3-125m", "llama3.1-8b", "mixtral-8x7b", "deepseek-v3", "nemotron-3-nano-30b-a3b")
GPU_COUNTS = (8, 2, 16)
# Configuration fields that are legal only beside another axis.
COMPANIONS = {"sequence_parallel": {"tp": 2}, "virtual_stages": {"pp": 2}, "first_stage_layers": {"pp": 2},
              "last_stage_layers": {"pp": 2}, "schedule": {"pp": 2}, "shard_degree": {"zero": 1},
              "reshard_after_forward": {"zero": 3}, "recompute_num_layers": {"recompute": "full"}}
SPEC_ROOTS = ("model", "training", "cluster")
# Spec fields legal only beside another: flags (CLI) and request keys (API).
# Mamba (mamba1) layers: one state per channel, dt of a rank (fitplan.specs.model.MambaSpec)
MAMBA1 = (["--mamba-version", "mamba1", "--mamba-heads", "4096", "--mamba-head-dim", "1", "--mamba-groups", "1"],
          {"mamba_version": "mamba1", "mamba_heads": 4096, "mamba_head_dim": 1, "mamba_groups": 1})
SPEC_COMPANIONS = {"full_attention_every": (["--sliding-window", "4096"], {"sliding_window": 4096}),
                   "version": (MAMBA1[0][2:], {k: v for k, v in MAMBA1[1].items() if k != "mamba_version"}),
                   "dt_rank": MAMBA1, "inner_norms": MAMBA1,
                   **{name: (["--finetune", "lora"], {"finetune": "lora"})
                      for name in ("lora_rank", "lora_targets", "base_precision")},
                   # layers kept in bf16 exist only beside low-precision GEMMs
                   **{name: (["--compute-precision", "fp8"], {"compute_precision": "fp8"})
                      for name in ("bf16_first_layers", "bf16_last_layers")},
                   # fp8 attention runs in a low-precision recipe's fused kernel
                   "attention_precision": (["--compute-precision", "fp8", "--attention-kernel", "flash"],
                                           {"compute_precision": "fp8", "attention_kernel": "flash"})}


def _argv_value(f, value) -> list[str]:
    if f.decl.kind == "bool":
        return [f.flag if value else f.off_flag]
    if f.decl.kind == "ints":
        return [f.flag, ",".join(map(str, value))]
    return [f.flag, str(enum_value(value))]


def _api_value(f, value):
    if f.decl.kind == "ints":
        return list(value)
    return enum_value(value)


def _cli_request(argv: list[str]) -> Request:
    return request_from_args(build_parser().parse_args(argv))


def _at(obj, path):
    return reduce(getattr, path, obj)


def _flag_cases(roots):
    return [f for f in command_flags("plan") if f.path[0] in roots and f.decl.example is not None]


def _resolved(f, extra_argv, extra_body):
    """The first base and GPU count where the example resolves and changes the field:
    (CLI resolution, API resolution)."""
    example = f.decl.example
    for base in BASES:
        for n in GPU_COUNTS:
            head = ["plan", "--preset", base, "--gpus", str(n), *extra_argv]
            body = {"preset": base, "gpus": n, **extra_body}
            try:
                cli = resolve(_cli_request(head + _argv_value(f, example)))
                before = resolve(_cli_request(head))
                if f.path[0] == "config":
                    cli_config, before_config = config_of(cli), config_of(before) if before.config else None
                    if before_config is not None and _at(before_config, f.path[1:]) == _at(cli_config, f.path[1:]):
                        continue
                elif _at(before.setup, f.path) == _at(cli.setup, f.path):
                    continue
            except SpecError:
                continue
            api = resolve(build_request("plan", {**body, f.key: _api_value(f, example)}))
            return cli, api
    raise AssertionError(f"{f.flag}: no base lets its example {example!r} resolve and change the field")


@pytest.mark.parametrize("f", _flag_cases(SPEC_ROOTS), ids=lambda f: f.flag)
def test_a_spec_field_round_trips_through_flags_api_and_spec_file(f, tmp_path):
    cli, api = _resolved(f, *SPEC_COMPANIONS.get(f.path[-1], ([], {})))
    assert cli.setup == api.setup
    expected = typed(f, f.decl.example)
    holder = _at(cli.setup, f.path[:-1])
    got = getattr(holder, f.path[-1])
    if f.decl.kind == "gpu":
        assert got == presets.gpu(f.decl.example)
    else:
        assert got == expected, (f.flag, got, expected)
    path = tmp_path / "spec.toml"
    s = cli.setup
    path.write_text(dump_toml(s.model, s.training, s.cluster))
    loaded = load_specs(path)
    assert (loaded.model, loaded.training, loaded.cluster) == (s.model, s.training, s.cluster)
    again = resolve(_cli_request(["plan", "--spec", str(path)]))
    assert again.setup == s


@pytest.mark.parametrize("f", _flag_cases(("config",)), ids=lambda f: f.flag)
def test_a_configuration_field_round_trips_through_flags_and_api(f):
    companions = COMPANIONS.get(f.path[-1], {})
    extra_argv = [x for k, v in companions.items() for x in (f"--{k}", str(v))]
    cli, api = _resolved(f, extra_argv, companions)
    assert config_of(cli) == config_of(api)
    assert getattr(config_of(cli), f.path[-1]) == typed(f, f.decl.example)


@pytest.mark.parametrize("command", ["plan", "sweep", "export", "infer"])
def test_every_option_field_gives_the_cli_request(command):
    """Options (search, sweep, export, infer): the same Request values from flags and from JSON. The
    server sets the output format of plan and sweep itself (its endpoint's), so that one key
    is left out of the comparison there."""
    options = [f for f in api_flags(command).values() if f.path[0] not in SPEC_ROOTS + ("config", "source")]
    required = [f for f in options if f.required]
    for f in options:
        others = [g for g in required if g is not f]
        cli = _cli_request([command, "--preset", "gpt3-175b", "--gpus", "16",
                            *[x for g in others for x in _argv_value(g, g.decl.example)],
                            *_argv_value(f, f.decl.example)])
        api = build_request(command, {"preset": "gpt3-175b", "gpus": 16, f.key: _api_value(f, f.decl.example),
                                      **{g.key: g.decl.example for g in others}})
        keep = (lambda values: values) if command == "export" else (
            lambda values: {k: v for k, v in values.items() if k != "format"})
        assert keep(cli.values) == keep(api.values), f.flag
        assert cli.values[f.key] == f.decl.example
    assert options


def _all_spec_classes():
    seen, todo = [], [ModelSpec, TrainingSpec, ClusterSpec]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo += [d.table for _, d in spec_fields(cls) if d.table is not None]
    return seen


def test_every_spec_field_is_declared_with_a_flag_or_a_reason():
    """No field escapes the declarations: each has a flag with an example, or says why not."""
    count = 0
    for cls in _all_spec_classes():
        for f in dataclasses.fields(cls):
            assert "decl" in f.metadata, f"{cls.__name__}.{f.name} has no declaration"
            d = decl_of(f)
            if d.kind == "table":
                continue
            count += 1
            assert d.flag is not None or d.file_only, f"{cls.__name__}.{f.name}: a flag, or file_only saying why"
            assert d.flag is None or d.example is not None, f"{cls.__name__}.{f.name}: an example to test with"
    assert count >= 45


def test_attention_kernel_and_moe_imbalance_load_and_are_written_back(tmp_path):
    """The issue's case: a spec file with attention_kernel = "flash" and moe_imbalance = 1.5
    loads (it was an unknown key), and presets show --toml writes both."""
    path = tmp_path / "spec.toml"
    path.write_text('[training]\nseq_len = 4096\nrecipe = "mixed-adam"\nattention_kernel = "flash"\n'
                    'moe_imbalance = 1.5\n')
    training = load_specs(path).training
    assert (training.attention_kernel, training.moe_imbalance) == ("flash", 1.5)
    text = dump_toml(training)
    assert 'attention_kernel = "flash"' in text and "moe_imbalance = 1.5" in text
    path.write_text(text)
    assert load_specs(path).training == training


def test_the_spec_file_reference_is_generated_from_the_declarations():
    """docs/spec-files.md is what `python tools/spec_reference.py` writes; rerun it after a change."""
    from pathlib import Path

    from fitplan.files.load import reference_markdown
    page = (Path(__file__).resolve().parents[2] / "docs" / "spec-files.md").read_text()
    assert page == reference_markdown()
    for cls in _all_spec_classes():
        for f, d in spec_fields(cls):
            if d.kind != "table":
                assert f"| `{d.key or f.name}` |" in page, f.name


def test_a_spec_checks_its_declared_ranges_choices_and_texts_on_construction():
    """check_ranges, run by every spec's __post_init__ (fitplan.specs.declare): a ranged number outside its declared
    bounds (cluster.nccl_channels: 1 to 128) or NaN, a choice outside its choices (training.act_bytes: 1, 2 or 4)
    and a text with a line break are refused, each naming the field; values at the bounds pass, the recipe's
    moments ((name, bytes) pairs, read pair by pair) among them."""
    from dataclasses import replace

    from fitplan import presets
    from fitplan.errors import SpecError
    from fitplan.specs import ClusterSpec, TrainingSpec
    base = ClusterSpec(gpu=presets.gpu("h100-80gb"), num_gpus=8, gpus_per_node=8, reserve_bytes=0)
    assert replace(base, nccl_channels=128).nccl_channels == 128   # at the upper bound
    with pytest.raises(SpecError, match=r"cluster.nccl_channels = 129 is out of range; give 1 to 128"):
        replace(base, nccl_channels=129)
    with pytest.raises(SpecError, match=r"cluster.nccl_channels = nan is out of range"):
        replace(base, nccl_channels=float("nan"))
    recipe = presets.recipe("mixed-adam")
    assert replace(recipe, moments=(("m", 64), ("v", 0))).moments == (("m", 64), ("v", 0))
    with pytest.raises(SpecError, match=r"recipe.source must be printable text"):
        replace(recipe, source="two\nlines")
    training = TrainingSpec(seq_len=2048, recipe=recipe)
    with pytest.raises(SpecError, match=r"training.act_bytes must be one of 1, 2, 4, got 3"):
        replace(training, act_bytes=3)
