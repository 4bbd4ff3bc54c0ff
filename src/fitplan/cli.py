"""fitplan's command line: argv -> Request -> fitplan.service.respond -> stdout.

The flags of plan, search, export, sweep, compare, infer and calibrate are generated from the fields'
declarations (fitplan.specs.declare, fitplan.request); this module only builds the
parser, turns the parsed namespace into a Request and writes the reply (and --output);
fitplan.commands runs presets, validate and calibrate and draws --plot and --plot-timeline.
Exit 0 fits, 1 does not fit, 2 bad input.
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
    if plot is not None or plot_timeline is not None:
        from fitplan.commands import write_plots
        write_plots(reply, plot=plot, plot_timeline=plot_timeline)
    if output is not None and reply.exit_code == 0:
        from fitplan.files.write import write_output
        write_output(output, reply.text, "--output")
        out.write(f"wrote {output}\n")
    else:
        out.write(reply.text)
    for note in reply.notes:
        err.write(f"fitplan: note: {note}\n")
    return reply.exit_code


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
        if args.command in ("presets", "validate", "calibrate"):   # outside the request path (fitplan.commands)
            from fitplan import commands
            return {"presets": commands.run_presets, "validate": commands.run_validate,
                    "calibrate": commands.run_calibrate}[args.command](args, out)
        if args.command == "serve":
            from fitplan.web.server import serve
            serve(host=args.host, port=args.port, allowed_hosts=args.allowed_host)
            return 0
        return run_request(args, out, err)
    except SystemExit as exit_:   # argparse's --help (exit 0); its errors are SpecErrors (_Parser)
        return int(exit_.code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
