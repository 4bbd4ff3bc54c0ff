"""The subcommands beyond `plan`: presets, export, sweep. Thin: parse -> core -> render."""
import json
from dataclasses import replace

from fitplan import presets
from fitplan.errors import SpecError
from fitplan.report.render import Table, render_text
from fitplan.setup_args import config_from_args, explicit_config, space_from_args
from fitplan.specs import TrainingSpec
from fitplan.units import GiB


def run_presets(args, out) -> int:
    from fitplan.report import document
    if args.action == "list":
        out.write(render_text(document.preset_list()))
        return 0
    if not args.name:
        raise SpecError("presets show: name a preset, e.g. 'fitplan presets show gpt3-175b'")
    obj = preset_object(args.name)
    if args.toml:
        from fitplan.files.load import dump_toml
        out.write(dump_toml(*obj) if isinstance(obj, tuple) else dump_toml(obj))
    else:
        out.write(repr(obj) + "\n")
    return 0


def preset_object(name: str):
    """A model preset as (ModelSpec, TrainingSpec), or a GpuSpec or Recipe."""
    if name in presets.MODELS:
        p = presets.MODELS[name]
        return p.model, TrainingSpec(seq_len=p.seq_len, recipe=presets.recipe("mixed-adam"),
                                     global_batch=p.global_batch)
    if name in presets.GPUS:
        return presets.GPUS[name]
    if name in presets.RECIPES:
        return presets.RECIPES[name]
    presets.model(name)   # unknown: raises with suggestions
    raise AssertionError("unreachable")


def chosen_config(args, setup, micro_batch):
    """The configuration flags, or else the search's recommendation (None if nothing fits)."""
    from fitplan.search import search
    if explicit_config(args):
        return config_from_args(args, setup, micro_batch)
    result = search(setup, space_from_args(args, setup, micro_batch), top=1, rank=args.rank)
    return result.suggestions[0].config if result.suggestions else None


def run_export(args, out, err) -> int:
    from fitplan.export import export, make_plan
    from fitplan.setup_args import setup_from_args
    setup, micro_batch = setup_from_args(args)
    config = chosen_config(args, setup, micro_batch)
    if config is None:
        out.write(f"nothing fits on {setup.cluster.num_gpus} GPUs, so there is no configuration to export; "
                  f"run 'fitplan plan ... --suggest' for the proof and the smallest GPU count\n")
        return 1
    from fitplan.timing.pipeline import num_microbatches
    gb = setup.training.global_batch or config.dp * config.micro_batch * num_microbatches(
        B=None, b=config.micro_batch, d=config.dp, p=config.pp)   # the time model's default, 4p
    result = export(args.format, make_plan(model=setup.model, training=setup.training, parallel=config,
                                           global_batch=gb, num_gpus=setup.cluster.num_gpus))
    if not result.ok:
        out.write(result.message + "\n")
        return 1
    if args.output:
        with open(args.output, "w") as f:
            f.write(result.text)
        out.write(f"wrote {args.output}\n")
    else:
        out.write(result.text if result.text.endswith("\n") else result.text + "\n")
    for note in result.notes:
        err.write(f"fitplan: note: {note}\n")
    return 0


def _sweep_values(args, setup) -> list:
    if args.values:
        try:
            values = [int(v) for v in args.values.split(",")]
        except ValueError:
            raise SpecError(f"--values: write whole numbers separated by commas, e.g. 8,16,32; got {args.values!r}")
        if not values or min(values) < 1 or len(values) > 64:
            raise SpecError("--values: give 1 to 64 numbers, each >= 1")
        return sorted(set(values))
    if args.over == "gpus":
        return [2**k for k in range(0, 13)]
    return [2**k for k in range(9, 18)]


def sweep_points(args, setup, micro_batch) -> list:
    """(x, the least per-GPU bytes any legal configuration needs at x, that configuration's breakdown)."""
    from fitplan.search import search
    points = []
    for x in _sweep_values(args, setup):
        if args.over == "gpus":
            s = replace(setup, cluster=replace(setup.cluster, num_gpus=x))
        else:
            s = replace(setup, training=replace(setup.training, seq_len=x))
        r = search(s, space_from_args(args, s, micro_batch), top=1, rank="disturbance")
        least = r.least_loaded
        points.append((x, None if least is None else int(least.per_gpu_bytes), least))
    return points


def run_sweep(args, out) -> int:
    from fitplan.setup_args import setup_from_args
    setup, micro_batch = setup_from_args(args)
    points = sweep_points(args, setup, micro_batch)
    usable = setup.cluster.usable_bytes
    fitting = [x for x, used, _ in points if used is not None and used <= usable]
    if args.format == "json":
        out.write(json.dumps({"over": args.over, "usable_bytes_per_gpu": usable, "points": [
            {"x": x, "per_gpu_bytes": used, "fits": used is not None and used <= usable} for x, used, _ in points],
            "smallest_fitting" if args.over == "gpus" else "largest_fitting":
            (min(fitting) if args.over == "gpus" else max(fitting)) if fitting else None}, sort_keys=True, indent=2)
            + "\n")
    else:
        rows = tuple((str(x), "-" if used is None else f"{used / GiB:,.2f}",
                      "yes" if used is not None and used <= usable else "no",
                      "" if b is None else f"tp={b.config.tp} pp={b.config.pp} cp={b.config.cp} "
                                           f"zero={int(b.config.zero)} recompute={b.config.recompute.value}")
                     for x, used, b in points)
        label = "GPUs" if args.over == "gpus" else "seq len"
        out.write(render_text([Table((label, "per-GPU GiB", "fits", "least-loaded configuration"), rows,
                                     align="rrll", note=f"usable {usable / GiB:,.2f} GiB per GPU")]))
    if args.plot:
        from fitplan.report.plot import plot_sweep
        plot_sweep([(x, used) for x, used, _ in points], usable, args.plot,
                   "GPU count" if args.over == "gpus" else "sequence length",
                   mark="smallest" if args.over == "gpus" else "largest")
    return 0 if fitting else 1


def plot_plan(path, setup, breakdowns, labels) -> None:
    from fitplan.report.plot import plot_breakdowns
    plot_breakdowns(breakdowns, labels, path, title=f"{setup.model.name} on {setup.cluster.num_gpus} x "
                                                    f"{setup.cluster.gpu.name}: busiest GPU")
