"""The commands that answer outside the request path (presets, validate, calibrate) and the picture files a
plan's --plot and --plot-timeline write: what fitplan.cli dispatches to, imported when argv asks for one."""
from fitplan.cli import check_files, request_from_args
from fitplan.errors import SpecError
from fitplan.request import Request


def write_plots(reply, *, plot: str | None, plot_timeline: str | None) -> None:
    """The pictures the flags name, of the reply's answer (a failed write: fitplan.files.write.unwritable, one
    line)."""
    if plot is not None:
        _write_file(plot, "--plot", lambda: _plot(plot, reply))
    if plot_timeline is not None:
        _write_file(plot_timeline, "--plot-timeline", lambda: _plot_timeline(plot_timeline, reply))


def _write_file(path: str, flag: str, write) -> None:
    from fitplan.files.write import unwritable
    try:
        write()
    except OSError as error:
        raise unwritable(path, flag, error) from None


def _plot(path: str, reply) -> None:
    from fitplan.answers import PlanAnswer
    from fitplan.sweep import SweepAnswer
    from fitplan.report.plot import plot_breakdowns, plot_sweep, sweep_title
    a, setup = reply.answer, reply.resolved.setup
    if isinstance(a, SweepAnswer):
        plot_sweep([(p.x, p.per_gpu_bytes) for p in a.points], a.usable_bytes, path,
                   {"gpus": "GPU count", "seq-len": "sequence length", "micro-batch": "micro-batch"}[a.over],
                   mark="smallest" if a.over == "gpus" else "largest",
                   title=sweep_title(setup.model.name, setup.cluster.gpu.name,
                                     num_gpus=None if a.over == "gpus" else setup.cluster.num_gpus))
        return
    assert isinstance(a, PlanAnswer)
    if a.search is not None:
        r = a.search.result
        shown = r.suggestions or ((r.least_loaded,) if r.least_loaded else ())
        breakdowns = [getattr(s, "breakdown", s) for s in shown]
        labels = [f"#{i}" for i in range(1, len(shown) + 1)] if r.suggestions else ["least loaded"]
    elif a.breakdown is not None:
        breakdowns, labels = [a.breakdown], ["this configuration"]
    else:
        breakdowns, labels = [s.breakdown for s in a.seed.strategies], [s.name for s in a.seed.strategies]
    plot_breakdowns(breakdowns, labels, path, title=f"{setup.model.name} on {setup.cluster.num_gpus} x "
                                                    f"{setup.cluster.gpu.name}: busiest GPU")


def _plot_timeline(path: str, reply) -> None:
    """The busiest GPU's memory over the step: the configuration asked about; with --suggest the
    recommended layout (else the first suggestion, else the least loaded); the seed's DDP."""
    from fitplan.analysis import margin_limit_bytes
    from fitplan.memory.events import stage_timeline
    from fitplan.report.plot import plot_timeline
    from fitplan.report.sentences import layout_words
    a, setup = reply.answer, reply.resolved.setup
    if a.search is not None:
        r = a.search.result
        pick = r.recommended or (r.suggestions[0] if r.suggestions else None)
        b = pick.breakdown if pick is not None else r.least_loaded
    elif a.breakdown is not None:
        b = a.breakdown
    else:
        b = a.seed.strategies[0].breakdown
    if b is None:
        raise SpecError("--plot-timeline: nothing is legal on these GPUs, so there is no step to draw")
    c = setup.cluster
    plot_timeline(stage_timeline(setup, b), path, usable_bytes=c.usable_bytes, capacity_bytes=c.gpu.memory_bytes,
                  margin_bytes=int(margin_limit_bytes(capacity=c.gpu.memory_bytes, usable=c.usable_bytes)),
                  title=f"{setup.model.name} on {c.num_gpus} x {c.gpu.name}, {layout_words(b.config)}: "
                        f"{b.stage} stage over the step")


def run_presets(args, out) -> int:
    from fitplan import presets
    from fitplan.report import document
    from fitplan.report.render import render_text
    if args.action == "list":
        if args.name is not None:
            raise SpecError(f"presets list: unexpected argument {args.name!r}; it lists every preset "
                            f"(to show one: fitplan presets show NAME)")
        out.write(render_text(document.preset_list()))
        return 0
    if not args.name:
        raise SpecError("presets show: name a preset, e.g. 'fitplan presets show gpt3-175b'")
    if args.toml:
        from fitplan.files.load import dump_toml
        obj = presets.by_name(args.name)
        out.write(dump_toml(*obj) if isinstance(obj, tuple) else dump_toml(obj))
    else:
        out.write(render_text(document.preset_show(args.name)))
    return 0


def run_validate(args, out) -> int:
    """Exit 0 when every row is within its stated tolerance (most are exact), 1 otherwise."""
    from fitplan.report.jsonout import dump
    from fitplan.validate import SMALL_LLAMA, TINY_GPT, TINY_HYBRID, TINY_LLAMA, TINY_MOE, run_validation
    from fitplan.validate.report import as_json, render_text
    try:
        worlds = tuple(int(w) for w in args.world_sizes.split(","))
    except ValueError:
        raise SpecError(f"--world-sizes: write process counts separated by commas, e.g. 2,4; got {args.world_sizes!r}")
    models = {"tiny-gpt": (TINY_GPT,), "tiny-llama": (TINY_LLAMA,), "tiny-moe": (TINY_MOE,),
              "tiny-hybrid": (TINY_HYBRID,), "small-llama": (SMALL_LLAMA,),
              "all": (TINY_GPT, TINY_LLAMA, TINY_MOE, TINY_HYBRID)}[args.model]
    reports = [run_validation(model=m, seq_len=args.seq_len, micro_batch=args.micro_batch, world_sizes=worlds,
                              device=args.device, include_distributed=not args.no_distributed) for m in models]
    ok = all(r.ok for r in reports)
    if args.json:
        runs = [as_json(r) for r in reports]
        rows = [{**row, "model": run["model"]} for run in runs for row in run["rows"]]
        out.write(dump({"ok": ok, "rows": rows, "runs": runs}))
    else:
        out.write("\n".join(render_text(r) for r in reports))
    return 0 if ok else 1


def run_calibrate(args, out) -> int:
    """Measure here (fitplan.calibrate, torch) and write the GPU spec file --output names."""
    request = request_from_args(args)
    check_files(request)     # before torch is imported and anything is measured
    if request.values.get("runs"):   # one's own measured runs: a fit, no measurement (fitplan.calibrate.own_runs)
        from fitplan.calibrate.own_runs import run as run_own
        return run_own(request, out)
    check_calibrate_size(request)
    try:
        from fitplan.calibrate.runner import run_calibrate as run
    except ImportError as error:
        raise SpecError(f"calibrate: needs torch ({error}); install it with pip install -e '.[torch]'") from None
    return run(request, out)


def check_calibrate_size(request: Request) -> None:
    """calibrate's largest buffers, in closed form before torch is imported: the biggest GEMM it
    times (fitplan.timing.layer_gemms' layer and output GEMMs at micro-batch x seq-len / cp tokens, its
    three operands at 4 B an element, the widest it makes) and the collective's message must fit
    the memory the run has (fitplan.validate.memory_limit)."""
    from dataclasses import replace

    from fitplan.request import CalibrateOptions, options
    from fitplan.resolve import resolve
    from fitplan.timing import layer_gemms as LG
    from fitplan.validate import memory_limit
    opts = options(CalibrateOptions, request)
    r = resolve(replace(request, values={"gpus": 1, **request.values}))
    model, c = r.setup.model, r.config
    T = max(1, r.micro_batch * r.setup.training.seq_len // c.get("cp", 1))
    gemms = LG.linear_gemms(model, T=T, t=c.get("tp", 1)) + LG.head_gemms(model, T=T, t=c.get("tp", 1))
    if model.moe is not None:
        gemms += LG.linear_gemms(model, T=T, t=c.get("tp", 1), ep=c.get("ep", 1), moe_layer=True)
    largest = max(4 * g.g * (g.m * g.k + g.k * g.n + g.m * g.n) for g in gemms)
    limit, where = memory_limit(opts.device)
    if largest > limit:
        raise SpecError(f"--seq-len {r.setup.training.seq_len} --micro-batch {r.micro_batch}: calibrate's largest "
                        f"GEMM would take {largest / 2**30:,.1f} GiB, more than {where} ({limit / 2**30:,.0f} GiB); "
                        f"lower them")
    if opts.message_bytes is not None and opts.message_bytes > limit:
        raise SpecError(f"--message {opts.message_bytes / 2**30:,.1f} GiB: more than {where} "
                        f"({limit / 2**30:,.0f} GiB); lower it")


# The planning commands use NumPy elementwise, on arrays of at most a few hundred thousand numbers: no BLAS routine
# that threads would speed up. NumPy's OpenBLAS starts a thread per core when it loads, and each spins for work
# before it sleeps; on a 2-core machine that spinning cost 60-110 ms of CPU per command, a quarter of the seed
# command's (bench/results-2026-12-03.md, "One BLAS thread for the planning commands"). So one BLAS thread,
# unless the environment names its own count or NumPy is already loaded (then it is too late to matter).
# validate and calibrate time PyTorch, whose CPU kernels read MKL_NUM_THREADS: they keep the machine's defaults.
