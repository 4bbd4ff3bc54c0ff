"""fitplan's command line: parse -> call the core -> render. Exit 0 fits, 1 does not fit, 2 bad input."""
import argparse
import sys

from fitplan.analysis import seed_answer
from fitplan.commands import plot_plan, run_export, run_presets, run_sweep
from fitplan.errors import SpecError
from fitplan.memory.bound import lower_bound
from fitplan.memory.breakdown import evaluate
from fitplan.report import document, jsonout
from fitplan.report.render import render_markdown, render_text
from fitplan.setup_args import (add_model_args, config_from_args, explicit_config, setup_from_args,
                                 smallest_fitting, space_from_args)
from fitplan.specs.parallel import Recompute

class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a SpecError (exit 2), never a traceback."""

    def error(self, message):
        raise SpecError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fitplan", description="Does training fit? Memory, parallelism and step-time planner.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    plan = sub.add_parser("plan", help="memory per GPU: the seed report, one configuration, or --suggest")
    add_plan_args(plan, gpus_required=False)
    srch = sub.add_parser("search", help="the same as 'plan --suggest'")
    add_plan_args(srch, gpus_required=False)
    pre = sub.add_parser("presets", help="list or show presets")
    pre.add_argument("action", choices=("list", "show"))
    pre.add_argument("name", nargs="?")
    pre.add_argument("--toml", action="store_true", help="print the preset as an editable spec file")
    exp = sub.add_parser("export", help="Megatron-LM / DeepSpeed / torchtitan configuration for a plan")
    add_model_args(exp, gpus_required=False)
    add_config_args(exp)
    exp.add_argument("--format", required=True, choices=("megatron", "deepspeed", "torchtitan", "torchtitan-python"))
    exp.add_argument("--output", help="write to this file instead of stdout")
    cmp = sub.add_parser("compare", help="pure TP, pure PP and a hybrid side by side: memory, traffic, bubble, time")
    add_model_args(cmp, gpus_required=False)
    cmp.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    cmp.add_argument("--json", dest="format", action="store_const", const="json")
    val = sub.add_parser("validate", help="predicted vs measured against PyTorch on small reference models "
                                          "(needs pip install -e '.[torch]')")
    val.add_argument("--model", choices=("tiny-gpt", "tiny-llama", "tiny-moe", "all"), default="all")
    val.add_argument("--seq-len", type=int, default=128)
    val.add_argument("--micro-batch", type=int, default=2)
    val.add_argument("--world-sizes", default="2", help="comma-separated process counts for the gloo checks (2-4)")
    val.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    val.add_argument("--no-distributed", action="store_true", help="skip the multi-process checks")
    val.add_argument("--json", action="store_true")
    srv = sub.add_parser("serve", help="a local web page for the same analyses (127.0.0.1:8765)")
    srv.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    srv.add_argument("--port", type=int, default=8765)
    swp = sub.add_parser("sweep", help="the least per-GPU memory any configuration needs, against GPU count or sequence length")
    add_model_args(swp, gpus_required=False)
    add_config_args(swp)
    swp.add_argument("--over", choices=("gpus", "seq-len"), default="gpus")
    swp.add_argument("--values", help="comma-separated x values (default: powers of two)")
    swp.add_argument("--plot", help="write a PNG here")
    swp.add_argument("--format", choices=("text", "json"), default="text")
    return parser


def add_plan_args(p, *, gpus_required: bool = True) -> None:
    add_model_args(p, gpus_required=gpus_required)
    add_config_args(p)
    p.add_argument("--suggest", action="store_true", help="search every legal configuration and rank those that fit")
    p.add_argument("--top", type=int, default=5)
    o = p.add_argument_group("output")
    o.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    o.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    o.add_argument("--plot", help="write a PNG of the per-GPU memory by term (matplotlib)")


def add_config_args(p) -> None:
    g = p.add_argument_group("one configuration (with --suggest: fixes that axis of the search)")
    g.add_argument("--tp", type=int)
    g.add_argument("--pp", type=int)
    g.add_argument("--dp", type=int)
    g.add_argument("--cp", type=int)
    g.add_argument("--ep", type=int, help="expert-parallel degree (MoE models), drawn from the tp x dp x cp ranks")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3))
    g.add_argument("--sequence-parallel", action="store_true", default=None)
    g.add_argument("--recompute", choices=[r.value for r in Recompute])
    g.add_argument("--virtual-stages", type=int, help="model chunks per pipeline rank (interleaved 1F1B)")
    s = p.add_argument_group("search")
    s.add_argument("--rank", choices=("disturbance", "throughput"), default="disturbance")
    s.add_argument("--allow-cross-node-tp", action="store_true")
    s.add_argument("--max-cp", type=int, default=8)


def run_plan(args, out) -> int:
    setup, micro_batch = setup_from_args(args)
    if args.top < 1:
        raise SpecError(f"--top must be >= 1, got {args.top}")
    if args.suggest or args.command == "search":
        from fitplan.search import search
        space = space_from_args(args, setup, micro_batch)
        result = search(setup, space, top=args.top, rank=args.rank)
        model, training = setup.model, setup.training
        from fitplan.counts.params import num_params
        bound = lower_bound(B=training.recipe.total_bytes, psi=num_params(model), e=training.act_bytes,
                            s=training.seq_len, b_min=min(space.micro_batches), h=model.hidden_size,
                            L=model.num_layers, N=setup.cluster.num_gpus, U=setup.cluster.usable_bytes)
        smallest = None if result.feasible else smallest_fitting(setup, args, micro_batch, bound.min_gpus)
        _write(out, args.format, jsonout.search, document.search, setup, result, bound, smallest)
        if args.plot:
            shown = result.suggestions or ((result.least_loaded,) if result.least_loaded else ())
            plot_plan(args.plot, setup, [getattr(s, "breakdown", s) for s in shown],
                      [f"#{i}" for i in range(1, len(shown) + 1)] if result.suggestions else ["least loaded"])
        return 0 if result.feasible else 1
    if explicit_config(args):
        breakdown = evaluate(setup, config_from_args(args, setup, micro_batch))
        _write(out, args.format, jsonout.breakdown, document.breakdown, setup, breakdown)
        if args.plot:
            plot_plan(args.plot, setup, [breakdown], ["this configuration"])
        return 0 if breakdown.fits else 1
    answer = seed_answer(setup, micro_batch=micro_batch)
    _write(out, args.format, jsonout.seed, document.seed, answer)
    if args.plot:
        plot_plan(args.plot, setup, [s.breakdown for s in answer.strategies], [s.name for s in answer.strategies])
    return 0 if any(s.breakdown.fits for s in answer.strategies) else 1


def run_validate(args, out) -> int:
    """Exit 0 when every row is within its stated tolerance (most are exact), 1 otherwise."""
    import json

    from fitplan.validate import TINY_GPT, TINY_LLAMA, TINY_MOE, run_validation
    from fitplan.validate.report import as_json, render_text
    try:
        worlds = tuple(int(w) for w in args.world_sizes.split(","))
    except ValueError:
        raise SpecError(f"--world-sizes: write process counts separated by commas, e.g. 2,4; got {args.world_sizes!r}")
    models = {"tiny-gpt": (TINY_GPT,), "tiny-llama": (TINY_LLAMA,), "tiny-moe": (TINY_MOE,),
              "all": (TINY_GPT, TINY_LLAMA, TINY_MOE)}[args.model]
    reports = [run_validation(model=m, seq_len=args.seq_len, micro_batch=args.micro_batch, world_sizes=worlds,
                              device=args.device, include_distributed=not args.no_distributed) for m in models]
    ok = all(r.ok for r in reports)
    if args.json:
        runs = [as_json(r) for r in reports]
        rows = [{**row, "model": run["model"]} for run in runs for row in run["rows"]]
        out.write(json.dumps({"ok": ok, "rows": rows, "runs": runs}, sort_keys=True, indent=2) + "\n")
    else:
        out.write("\n".join(render_text(r) for r in reports))
    return 0 if ok else 1


def run_compare(args, out) -> int:
    from fitplan.compare import compare
    setup, micro_batch = setup_from_args(args)
    result = compare(setup, micro_batch=micro_batch)
    _write(out, args.format, jsonout.compare, document.compare, setup, result)
    return 0 if result.preferred else 1


def _write(out, fmt: str, as_json, as_blocks, *data) -> None:
    if fmt == "json":
        out.write(as_json(*data))
    else:
        out.write((render_markdown if fmt == "markdown" else render_text)(as_blocks(*data)))


def main(argv: list[str] | None = None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["plan", *argv]
    try:
        args = build_parser().parse_args(argv)
        if args.command == "presets":
            return run_presets(args, out)
        if args.command == "export":
            return run_export(args, out, err)
        if args.command == "sweep":
            return run_sweep(args, out)
        if args.command == "compare":
            return run_compare(args, out)
        if args.command == "validate":
            return run_validate(args, out)
        if args.command == "serve":
            from fitplan.web.server import serve
            serve(host=args.host, port=args.port)
            return 0
        return run_plan(args, out)
    except SpecError as error:
        err.write(f"fitplan: {one_line(str(error))}\n")
        return 2


def one_line(message: str) -> str:
    """User text inside a message (a key, a file name) may hold newlines or control
    characters; escape them so the error stays one line."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
