"""`fitplan calibrate --runs FILE --output FILE`: the end-to-end constants fitted on one's own measured runs.

FILE is TOML, one [[run]] per measured run: the `fitplan plan` flags that state it exactly (one configuration,
not --suggest) and what it measured, tokens_per_s_per_gpu or step_s:

    [[run]]
    flags = "--preset llama3.1-8b --gpus 8 --zero 3 --seq-len 8192 --micro-batch 1 --global-batch 64"
    tokens_per_s_per_gpu = 5800      # or step_s = 2.8

Every run must be on one GPU (the spec written is that GPU's). The fit is fitplan.calibrate.runs.fit with the
shipped fit as its prior (fitplan.timing.fitted), so a constant the runs say nothing about keeps the shipped
value; with fewer runs than constants only the sustained clock fraction is fitted, and the report says so. The
output is the GPU's [gpu] table with an [gpu.end_to_end] table of the fitted values, the run count and the
residuals' 10th and 90th percentiles, which `--gpu-spec` applies (and the error band reads). No GPU is needed.
"""
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np

from fitplan.calibrate import runs as R
from fitplan.errors import SpecError
from fitplan.record import record
from fitplan.specs.cluster import EndToEndSpec
from fitplan.timing import calibration as CAL

RUN_KEYS = ("name", "flags", "tokens_per_s_per_gpu", "step_s")
# the GpuSpec.end_to_end field each fitted constant lands in (the clock: the GPU's architecture's)
SPEC_FIELD = {"attention_scale": "attention_scale", "elementwise_scale": "elementwise_scale",
              "moe_traffic": "moe_traffic",
              "sm_sharing": "sm_sharing", "layer_overhead": "layer_overhead", "moe_sync_overhead": "moe_sync_overhead",
              "collective_overhead": "collective_overhead", "comm_efficiency": "comm_efficiency",
              "a2a_efficiency": "a2a_efficiency", "straggler_cv": "straggler_cv"}
PRIOR_SCALE = 30.0   # one's own runs decide: the shipped fit's prior sd x 30 holds only what they leave open


@record
class Result:
    runs: tuple
    free: tuple
    before: dict              # constant -> the shipped value
    after: dict               # constant -> fitted
    error_before: np.ndarray  # (predicted - measured)/measured per run
    error_after: np.ndarray
    gpu: object               # the GpuSpec written
    notes: tuple


def read_runs(path: str) -> list:
    """The file's runs as (name, flags, measured step or None, tokens/s/GPU or None); a SpecError naming the
    run and key for anything fitplan cannot use."""
    where = f"--runs {path}"
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError(f"{where}: no such file; give a TOML file of [[run]] tables") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, OSError) as error:
        raise SpecError(f"{where}: cannot read it ({type(error).__name__}); give a readable TOML file") from None
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{where}: not TOML ({error}); write one [[run]] table per measured run") from None
    runs = data.get("run")
    extra = sorted(set(data) - {"run"})
    if extra:
        raise SpecError(f"{where}: unknown key {extra[0]!r}; the file holds [[run]] tables only")
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
        raise SpecError(f"{where}: no [[run]] tables; each gives flags = \"...\" and tokens_per_s_per_gpu or step_s")
    out = []
    for i, r in enumerate(runs, 1):
        at = f"{where}: run {i}"
        unknown = sorted(set(r) - set(RUN_KEYS))
        if unknown:
            raise SpecError(f"{at}: unknown key {unknown[0]!r}; a run takes {', '.join(RUN_KEYS)}")
        flags = r.get("flags")
        if not isinstance(flags, str) or not flags.strip():
            raise SpecError(f"{at}: flags must be the plan's flags as one string, e.g. flags = \"--preset "
                            f"llama3.1-8b --gpus 8 --zero 3\"")
        given = [k for k in ("tokens_per_s_per_gpu", "step_s") if k in r]
        if len(given) != 1:
            raise SpecError(f"{at}: give exactly one of tokens_per_s_per_gpu and step_s")
        value = r[given[0]]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < 1e12) \
                or value != value:
            raise SpecError(f"{at}: {given[0]} must be a positive number, got {value!r}")
        name = r.get("name", f"run {i}")
        if not isinstance(name, str):
            raise SpecError(f"{at}: name must be text")
        out.append((name, flags, given[0], float(value)))
    return out


def resolve_runs(read) -> list:
    """Each run's setup and configuration from its flags, and its measured step time."""
    import shlex
    from fitplan.cli import build_parser, request_from_args
    from fitplan.resolve import config_of, explicit_config, resolve
    out = []
    for i, (name, flags, kind, value) in enumerate(read, 1):
        try:
            argv = shlex.split(flags)
        except ValueError as error:
            raise SpecError(f"--runs: run {i} ({name}): its flags do not parse ({error})") from None
        if "--suggest" in argv or (argv and argv[0] in ("plan", "search")):
            raise SpecError(f"--runs: run {i} ({name}): give the flags of one configuration, without the command "
                            f"or --suggest")
        try:
            r = resolve(request_from_args(build_parser("plan").parse_args(["plan"] + argv)))
            config = config_of(r)
        except SpecError as error:
            raise SpecError(f"--runs: run {i} ({name}): {error}") from None
        if not explicit_config(r):
            raise SpecError(f"--runs: run {i} ({name}): state the layout it ran (--tp, --pp, --zero, ...), not "
                            f"plain data parallelism by default, or give --dp to say so")
        setup = r.setup
        step = value if kind == "step_s" else R.tokens_to_step_s(
            tokens_per_s_per_gpu=value, global_batch=setup.training.global_batch, seq_len=setup.training.seq_len,
            gpus=config.world_size)
        out.append(R.Run(name=name, flags=flags, setup=setup, config=config, measured_step_s=step, group=name))
    gpus = sorted({r.setup.cluster.gpu.name for r in out})
    if len(gpus) > 1:
        raise SpecError(f"--runs: the runs span GPUs {', '.join(gpus)}; calibrate one GPU per file")
    return out


def fit_own(runs) -> Result:
    """Fit the constants on the runs, from and toward the shipped fit."""
    gpu = runs[0].setup.cluster.gpu
    clock = CAL.CLOCK_OF.get(gpu.architecture)
    notes = []
    if clock is None:
        raise SpecError(f"--runs: gpu {gpu.name} has no architecture with an end-to-end clock constant "
                        f"({', '.join(CAL.CLOCK_OF)}); its runs cannot be calibrated")
    if len(runs) < len(SPEC_FIELD) + 1:
        free = (clock,)
        notes.append(f"{len(runs)} runs, fewer than the {len(SPEC_FIELD) + 1} constants: only the sustained clock "
                     f"fraction ({clock}) is fitted; the others keep the shipped fit's values")
    else:
        free = (clock,) + tuple(SPEC_FIELD)
    before = dict(CAL.SHIPPED)
    fit = R.fit(runs, free=free, start=before, prior_values=before, prior_scale=PRIOR_SCALE)
    measured = np.array([r.measured_step_s for r in runs])
    err0 = R.predict(runs, before)[:, 0] / measured - 1
    err1 = np.exp(fit.residuals) - 1
    moved = [n for n in free if fit.sensitivity.get(n, 0) == 0]
    if moved:
        notes.append(f"no run depends on {', '.join(moved)}: kept at the shipped value")
    resid = -fit.residuals   # ln(measured/predicted)
    spec = EndToEndSpec(clock=_sig(fit.values[clock]),
                        **{field: _sig(fit.values[name]) for name, field in SPEC_FIELD.items() if name in free},
                        runs=len(runs), residual_low=round(float(np.quantile(resid, 0.1)), 4),
                        residual_high=round(float(np.quantile(resid, 0.9)), 4))
    out_gpu = replace(gpu, name=f"{gpu.name} (calibrated on {len(runs)} runs)", end_to_end=spec)
    return Result(tuple(runs), free, {n: before[n] for n in free}, {n: fit.values[n] for n in free}, err0, err1,
                  out_gpu, tuple(notes))


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def spec_text(res: Result) -> str:
    from fitplan.files.load import dump_toml
    lines = [f"# written by fitplan calibrate --runs on {len(res.runs)} measured runs; error before -> after:"]
    lines += [f"#   {r.name}: {a:+.1%} -> {b:+.1%}" for r, a, b in zip(res.runs, res.error_before, res.error_after)]
    lines += [f"# note: {n}" for n in res.notes]
    return "\n".join(lines) + "\n" + dump_toml(res.gpu)


def report(res: Result, output: str) -> str:
    lines = [f"fitplan calibrate --runs: {len(res.runs)} runs on {res.runs[0].setup.cluster.gpu.name}",
             "  constant                 before      after"]
    lines += [f"  {n:<22} {res.before[n]:>10.4g} {res.after[n]:>10.4g}" for n in res.free]
    lines.append("  run                                        error before   after")
    lines += [f"  {r.name:<42} {a:>+12.1%} {b:>+7.1%}" for r, a, b in zip(res.runs, res.error_before,
                                                                           res.error_after)]
    med0, med1 = (float(np.median(np.abs(e))) for e in (res.error_before, res.error_after))
    lines.append(f"  median |error| {med0:.1%} -> {med1:.1%}")
    lines += [f"  note: {n}" for n in res.notes]
    lines.append(f"wrote {output}: plan with it by 'fitplan plan ... --gpu-spec {output}'")
    return "\n".join(lines) + "\n"


def run(request, out) -> int:
    from fitplan.request import CalibrateOptions, options
    opts = options(CalibrateOptions, request)
    res = fit_own(resolve_runs(read_runs(opts.runs)))
    from fitplan.files.write import write_output
    write_output(opts.output, spec_text(res), "--output")
    out.write(report(res, opts.output))
    return 0
