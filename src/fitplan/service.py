"""One request path: a Request in, the answer and its rendered text out.

The command line and the web server both call `respond`; neither parses the other's
output. The reply's text is exactly what the CLI prints on stdout (and the API returns
as its body), its exit code the CLI's: 0 fits (or the export was written), 1 the analysis
ran and nothing asked about fits (or the framework cannot express the plan). Bad input
raises SpecError (the CLI's exit 2, the API's 400).
"""

from fitplan import answers
from fitplan.errors import SpecError
from fitplan.record import record
from fitplan.report.render import render_markdown, render_text
from fitplan.request import ExportOptions, PlanOptions, Request, SweepOptions, options
from fitplan.resolve import Resolved, config_of, explicit_config, fixed_axes, resolve


@record(slots=True)
class Reply:
    exit_code: int
    text: str                        # stdout of the CLI, the body of the API
    notes: tuple[str, ...] = ()      # remarks beside the text (an export's notes: the CLI's stderr)
    answer: object = None            # what the text renders, for the CLI's plots
    resolved: Resolved | None = None


def respond(request: Request) -> Reply:
    if request.command == "infer":   # serving: no training spec to resolve
        return _infer(request)
    if request.command not in _COMMANDS:
        raise SpecError(f"unknown command {request.command!r}; use plan, search, export, sweep, compare or infer")
    resolved = resolve(request)
    return _COMMANDS[request.command](request, resolved)


def _render(fmt: str, name: str, *data) -> str:
    """The report `name`: fitplan.report.jsonout's (--format json) or fitplan.report.document's
    blocks, rendered; each report module is imported only when its report is asked for."""
    if fmt == "json":
        from fitplan.report import jsonout
        return getattr(jsonout, name)(*data)
    from fitplan.report import document
    return (render_markdown if fmt == "markdown" else render_text)(getattr(document, name)(*data))


def _plan(request: Request, r: Resolved) -> Reply:
    opts = options(PlanOptions, request)
    suggesting = opts.suggest or request.command == "search"
    config = None
    if suggesting:
        fixed = fixed_axes(r)
    else:
        fixed = {}
        if explicit_config(r):
            config = config_of(r)
    answer = answers.plan(r.setup, r.micro_batch, config=config, suggesting=suggesting, opts=r.search, fixed=fixed)
    if answer.search is not None:
        s = answer.search
        text = _render(opts.format, "search", r.setup, s.result, s.bound, s.smallest)
    elif answer.breakdown is not None:
        text = _render(opts.format, "breakdown", r.setup, answer.breakdown)
    else:
        text = _render(opts.format, "seed", answer.seed)
    return Reply(0 if answer.fits else 1, text, answer=answer, resolved=r)


def _compare(request: Request, r: Resolved) -> Reply:
    from fitplan.compare import compare
    from fitplan.request import CompareOptions
    fmt = options(CompareOptions, request).format
    result = compare(r.setup, micro_batch=r.micro_batch)
    return Reply(0 if result.preferred else 1, _render(fmt, "compare", r.setup, result),
                 answer=result, resolved=r)


def _sweep(request: Request, r: Resolved) -> Reply:
    from fitplan.report import sweep as sweep_report
    from fitplan.sweep import sweep
    opts = options(SweepOptions, request)
    answer = sweep(r.setup, r.micro_batch, over=opts.over, values=opts.values, opts=r.search, fixed=fixed_axes(r))
    text = sweep_report.as_json(answer) if opts.format == "json" else render_text(sweep_report.blocks(answer))
    return Reply(0 if answer.fitting else 1, text, answer=answer, resolved=r)


def _export(request: Request, r: Resolved) -> Reply:
    from fitplan.export import export, make_plan
    opts = options(ExportOptions, request)
    given = config_of(r) if explicit_config(r) else None
    config, picked = answers.chosen_config(r.setup, r.micro_batch, config=given, opts=r.search,
                                           fixed={} if given else fixed_axes(r), pick=opts.pick)
    if config is None:
        return Reply(1, f"nothing fits on {r.setup.cluster.num_gpus} GPUs, so there is no configuration to export; "
                        f"run 'fitplan plan ... --suggest' for the proof and the smallest GPU count\n", resolved=r)
    plan = make_plan(model=r.setup.model, training=r.setup.training, parallel=config,
                     global_batch=answers.export_global_batch(r.setup, config), num_gpus=r.setup.cluster.num_gpus,
                     gpus_per_node=r.setup.cluster.gpus_per_node, picked=picked.replace("-", " "))
    result = export(opts.format, plan, torchtitan_version=opts.torchtitan_version)
    if not result.ok:
        return Reply(1, result.message + "\n", answer=result, resolved=r)
    text = result.text if result.text.endswith("\n") else result.text + "\n"
    return Reply(0, text, notes=tuple(result.notes), answer=result, resolved=r)


def _infer(request: Request) -> Reply:
    from fitplan.report import serving as serving_report
    from fitplan.resolve import resolve_serving
    from fitplan.serving import plan_serving
    q = resolve_serving(request)
    o = q.options
    answer = plan_serving(q.model, q.cluster, tp=q.tp, pp=q.pp, batch=o.batch, context=q.context,
                          weight_precision=o.weight_precision, kv_precision=o.kv_precision, assumed=q.assumed)
    fits = answer.fits
    if o.server is not None:   # the server's own budget decides: its pool, not fitplan's usable memory
        from dataclasses import replace

        from fitplan.servers import ServerSettings, plan_server
        settings = ServerSettings(o.server, o.gpu_memory_utilization, o.mem_fraction_static, o.max_num_batched_tokens,
                                  o.max_num_seqs)
        answer = replace(answer, server=plan_server(answer, settings))
        fits = answer.server.fits
    else:
        from fitplan.servers import check_unused
        check_unused(o)
    text = serving_report.as_json(answer) if o.format == "json" else \
        (render_markdown if o.format == "markdown" else render_text)(serving_report.blocks(answer))
    return Reply(0 if fits else 1, text, answer=answer)


_COMMANDS = {"plan": _plan, "search": _plan, "compare": _compare, "sweep": _sweep, "export": _export}
