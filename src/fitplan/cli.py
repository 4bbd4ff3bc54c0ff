"""fitplan's command line: argv -> Request -> fitplan.service.respond -> stdout.

The flags of plan, search, export, sweep, compare, infer and calibrate are generated from the fields'
declarations (fitplan.specs.declare, fitplan.request); this module only builds the
parser, turns the parsed namespace into a Request and writes the reply (and the files a
flag asks for: --plot, --output). Exit 0 fits, 1 does not fit, 2 bad input.
"""
import argparse
import os
import sys
import traceback

from fitplan.errors import SpecError, one_line
from fitplan.request import Request, command_flags

HELP = {"plan": "memory per GPU: the seed report, one configuration, or --suggest",
        "search": "the same as 'plan --suggest'",
        "export": "Megatron-LM / DeepSpeed / torchtitan configuration for a plan",
        "sweep": "the least per-GPU memory any configuration needs, against GPU count, sequence length or "
                 "micro-batch",
        "compare": "pure TP, pure PP and a hybrid side by side: memory, traffic, bubble, time",
        "infer": "serving memory: weights and KV cache per GPU, the largest batch and context, the decode bound",
        "calibrate": "measure this machine's GEMMs at the model's shapes and its collectives (under torchrun: "
                     "across the ranks), and write a GPU spec file for --gpu-spec (needs pip install -e '.[torch]')"}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a SpecError (exit 2), never a traceback."""

    def error(self, message):
        command = self.prog.removeprefix("fitplan").strip()
        raise SpecError(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)")


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"write whole numbers separated by commas, e.g. 8,16,32; got {text!r}")


_TYPES = {"int": int, "number": float, "moments": float, "ints": _ints}
_METAVARS = {"int": "N", "number": "X", "moments": "BYTES", "size": "SIZE", "rate": "RATE", "seconds": "TIME",
             "power": "POWER", "count": "COUNT", "ints": "N,N,..."}


def add_declared_flags(parser, command: str) -> None:
    """Every flag the command takes, from the declarations, in their help groups."""
    groups = {}
    for f in command_flags(command):
        d = f.decl
        group = groups.get(d.group) or groups.setdefault(d.group, parser.add_argument_group(d.group))
        if d.kind == "bool":
            on = dict(dest=f.key, default=None, help=d.help)
            if f.off_flag is None:
                group.add_argument(f.flag, action="store_true", **on)
            else:
                group.add_argument(f.flag, action="store_const", const=True, **on)
                group.add_argument(f.off_flag, dest=f.key, action="store_const", const=False,
                                   help=f"the opposite of {f.flag}")
            continue
        kw = dict(dest=f.key, help=d.help, type=_TYPES.get(d.kind, str))
        if d.kind in _METAVARS:
            kw["metavar"] = _METAVARS[d.kind]
        if d.kind in ("enum", "choice"):   # checked with the API's message (fitplan.request.checked)
            kw["metavar"] = "{" + ",".join(map(str, d.choice_values)) + "}"
            if all(isinstance(c, int) for c in d.choice_values):
                kw["type"] = int
        group.add_argument(f.flag, required=f.required, **kw)
        if f.path[-1] == "format" and "json" in d.choice_values:
            group.add_argument("--json", dest="format", action="store_const", const="json",
                               help="the same as --format json")


COMMANDS = ("plan", "search", "presets", "export", "compare", "infer", "validate", "serve", "sweep", "calibrate")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the subcommand that argv names, only that one (each subparser
    costs argparse's gettext lookups, ~0.1 ms, and the declared ones ~70 generated flags; the
    others are only needed for the top-level --help and an unknown command's message)."""
    parser = _Parser(prog="fitplan", description="Does training fit? Memory, parallelism and step-time planner.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    wanted = lambda name: command not in COMMANDS or command == name

    def add_declared(name):
        if wanted(name):
            add_declared_flags(sub.add_parser(name, help=HELP[name]), name)

    add_declared("plan")
    add_declared("search")
    if wanted("presets"):
        pre = sub.add_parser("presets", help="list or show presets")
        pre.add_argument("action", choices=("list", "show"))
        pre.add_argument("name", nargs="?")
        pre.add_argument("--toml", action="store_true", help="print the preset as an editable spec file")
    add_declared("export")
    add_declared("compare")
    add_declared("infer")
    if wanted("validate"):
        val = sub.add_parser("validate", help="predicted vs measured against PyTorch on small reference models "
                                              "(needs pip install -e '.[torch]')")
        val.add_argument("--model", choices=("tiny-gpt", "tiny-llama", "tiny-moe", "tiny-hybrid", "small-llama", "all"),
                         default="all", help="all: the four tiny models (tiny-hybrid: Mamba-2, attention and MLP "
                                             "layers); small-llama (336M parameters) is for --device cuda")
        val.add_argument("--seq-len", type=int, default=128)
        val.add_argument("--micro-batch", type=int, default=2)
        val.add_argument("--world-sizes", default="2", help="comma-separated process counts for the gloo checks (2-4)")
        val.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
        val.add_argument("--no-distributed", action="store_true", help="skip the multi-process checks")
        val.add_argument("--json", action="store_true")
    if wanted("serve"):
        srv = sub.add_parser("serve", help="a local web page for the same analyses (127.0.0.1:8765)")
        srv.add_argument("--host", default="127.0.0.1",
                         help="address to listen on (default loopback only; 0.0.0.0 or '' prints a warning)")
        srv.add_argument("--port", type=int, default=8765)
        srv.add_argument("--allowed-host", metavar="NAME", action="append", default=[],
                         help="a Host name the server answers to besides loopback ones (repeatable), "
                              "e.g. the machine's name when --host 0.0.0.0")
    add_declared("sweep")
    add_declared("calibrate")
    return parser


def request_from_args(args) -> Request:
    values = {f.key: getattr(args, f.key) for f in command_flags(args.command)
              if getattr(args, f.key, None) is not None}
    return Request(command=args.command, values=values)


OUTPUT_KEYS = {"output": "--output", "plot": "--plot", "plot_timeline": "--plot-timeline"}   # files fitplan writes


def check_files(request: Request) -> None:
    """Every file the request names, checked before any work (fitplan.files.write.check_outputs):
    the outputs can be written, none is an input (--spec, --hf-config, --gpu-spec: every path the
    API does not take), and no two are one file."""
    flags = {f.key: f.flag for f in command_flags(request.command)}
    outputs = [(flag, request.values.get(key)) for key, flag in OUTPUT_KEYS.items() if key in flags]
    if all(path is None for _, path in outputs):   # nothing to write: nothing to check
        return
    from fitplan.files.write import check_outputs
    inputs = [(f.flag, request.values.get(f.key)) for f in command_flags(request.command)
              if not f.decl.api and f.decl.kind == "str" and f.key not in OUTPUT_KEYS]
    check_outputs(outputs, inputs)


def run_request(args, out, err) -> int:
    """Answer the request; files a flag names (--output, --plot) are checked before any work
    and written (all or nothing, fitplan.files.write) before anything is printed, so a
    destination that fails is one line, exit 2."""
    from fitplan.service import respond
    request = request_from_args(args)
    output, plot = request.values.get("output"), request.values.get("plot")
    plot_timeline = request.values.get("plot_timeline")
    check_files(request)
    reply = respond(request)
    if plot is not None:
        _write_file(plot, "--plot", lambda: _plot(plot, reply))
    if plot_timeline is not None:
        _write_file(plot_timeline, "--plot-timeline", lambda: _plot_timeline(plot_timeline, reply))
    if output is not None and reply.exit_code == 0:
        from fitplan.files.write import write_output
        write_output(output, reply.text, "--output")
        out.write(f"wrote {output}\n")
    else:
        out.write(reply.text)
    for note in reply.notes:
        err.write(f"fitplan: note: {note}\n")
    return reply.exit_code


def _write_file(path: str, flag: str, write) -> None:
    from fitplan.files.write import unwritable
    try:
        write()
    except OSError as error:
        raise unwritable(path, flag, error) from None


def _plot(path: str, reply) -> None:
    from fitplan.answers import PlanAnswer, SweepAnswer
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
    from fitplan.memory.breakdown import stage_timeline
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
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread(command: str) -> None:
    if command in ("validate", "calibrate") or "numpy" in sys.modules:
        return
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


def main(argv: list[str] | None = None, out=None, err=None) -> int:
    """Exit 0 fits, 1 does not fit (an answer), 2 bad input (one line), 3 a bug in fitplan
    (one line; --debug or FITPLAN_DEBUG=1 shows the traceback)."""
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("FITPLAN_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["plan", *argv]
    one_blas_thread(argv[0])
    try:
        return _dispatch(argv, out, err)
    except SpecError as error:
        err.write(f"fitplan: {one_line(str(error))}\n")
        return 2
    except KeyboardInterrupt:
        err.write("fitplan: interrupted\n")
        return 130
    except Exception as error:   # a bug: one line, not a traceback, and not exit 1 ("does not fit")
        if debug:
            traceback.print_exc(file=err)
        err.write(f"fitplan: internal error: {type(error).__name__}: {one_line(str(error))}; this is a bug in "
                  f"fitplan{'' if debug else ' (rerun with --debug for the traceback)'}\n")
        return 3


def _dispatch(argv: list[str], out, err) -> int:
    try:
        args = build_parser(argv[0]).parse_args(argv)
        if args.command == "presets":
            return run_presets(args, out)
        if args.command == "validate":
            return run_validate(args, out)
        if args.command == "calibrate":
            return run_calibrate(args, out)
        if args.command == "serve":
            from fitplan.web.server import serve
            serve(host=args.host, port=args.port, allowed_hosts=args.allowed_host)
            return 0
        return run_request(args, out, err)
    except SystemExit as exit_:   # argparse's --help (exit 0); its errors are SpecErrors (_Parser)
        return int(exit_.code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
