"""The one request every front end builds: the CLI from argv, the web server from JSON.

A Request is a command and the values the user gave, keyed by request key (the flag
without dashes: --kv-heads -> kv_heads), as plain JSON-like values: ints, floats, strings,
booleans, lists of ints. Which keys a command takes, their kinds, flags, ranges and help
come from the declarations: the specs' fields (fitplan.specs.declare) and the option
classes below, declared the same way. fitplan.resolve turns a Request into specs and
fitplan.service answers it; the front ends only parse and print.
"""
import functools
from dataclasses import MISSING, field, fields, replace

from fitplan.errors import SpecError
from fitplan.record import record
from fitplan.specs.serving import KV_PRECISIONS, SERVERS, WEIGHT_PRECISIONS
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from fitplan.specs.declare import Flagged, declared, flagged, num_text, out_of_range
from fitplan.units import UNIT_PARSERS

FORMATS = ("text", "markdown", "json")
EXPORT_FORMATS = ("megatron", "deepspeed", "torchtitan", "torchtitan-python")
RANKS = ("disturbance", "throughput", "cost")
TORCHTITAN_VERSIONS = ("0.2", "0.3", "main")


@record(kw_only=True)
class ModelSource:
    """Where the model comes from: at most one of these (flags and spec-file tables add to it);
    and a GPU spec file, the GPU's source beside the model's."""
    preset: str | None = declared("str", default=None, flag="--preset", group="model", example="llama3.1-8b",
                                  help="model preset, e.g. gpt3-175b (fitplan presets list)")
    hf_config: str | None = declared("str", default=None, flag="--hf-config", group="model", api=False,
                                     help="a Hugging Face config.json, or a folder holding one")
    spec: str | None = declared("str", default=None, flag="--spec", group="model", api=False,
                                help="a TOML or JSON spec file with [model], [training], [gpu] and/or [cluster]")
    gpu_spec: str | None = declared("str", default=None, flag="--gpu-spec", group="cluster", api=False,
                                    help="a TOML or JSON file whose [gpu] table is the GPU (e.g. what 'fitplan "
                                         "calibrate' writes); GPU flags still override its fields")


@record(kw_only=True)
class SearchOptions:
    """How the search runs (plan --suggest, export and sweep without a configuration)."""
    rank: str = declared("choice", default="disturbance", choices=RANKS, flag="--rank", group="search",
                         example="throughput", help="least disturbance first, shortest step time first, or lowest cost to "
                                                     "train first (cost needs --gpu-hour-price)")
    allow_cross_node_tp: bool = declared("bool", default=False, flag="--allow-cross-node-tp", group="search",
                                         example=True, help="let tensor-parallel groups span nodes")
    max_cp: int | None = declared("int", default=None, flag="--max-cp", group="search", lo=1, hi=64, example=4,
                                  help="the largest context-parallel degree searched (default: 8, 16 from 128K "
                                       "tokens, 32 from 1M)")
    top: int = declared("int", default=5, flag="--top", group="search", lo=1, hi=100, example=3,
                        help="how many configurations to show")


@record(kw_only=True)
class PlanOptions:
    suggest: bool = declared("bool", default=False, flag="--suggest", group="search", example=True,
                             help="search every legal configuration and rank those that fit")
    format: str = declared("choice", default="text", choices=FORMATS, flag="--format", group="output", api=False,
                           help="text, markdown or json")
    plot: str | None = declared("str", default=None, flag="--plot", group="output", api=False,
                                help="write a PNG of the per-GPU memory by term (matplotlib)")
    plot_timeline: str | None = declared("str", default=None, flag="--plot-timeline", group="output", api=False,
                                         help="write a PNG of the busiest GPU's memory over the step, event by event "
                                              "(the recommended layout with --suggest)")


@record(kw_only=True)
class SweepOptions:
    over: str = declared("choice", default="gpus", choices=("gpus", "seq-len", "micro-batch"), flag="--over",
                         group="sweep", example="seq-len",
                         help="the x axis: GPU count, sequence length or micro-batch")
    values: tuple | None = declared("ints", default=None, flag="--values", group="sweep", lo=1, hi=2**24, example=(8, 16),
                                    help="comma-separated x values (default: powers of two)")
    format: str = declared("choice", default="text", choices=("text", "json"), flag="--format", group="output",
                           api=False, help="text or json")
    plot: str | None = declared("str", default=None, flag="--plot", group="output", api=False, help="write a PNG here")


@record(kw_only=True)
class ExportOptions:
    format: str = declared("choice", choices=EXPORT_FORMATS, flag="--format", group="export",
                           example="deepspeed", help="the framework whose configuration is written")
    output: str | None = declared("str", default=None, flag="--output", group="export", api=False,
                                  help="write to this file instead of stdout")
    pick: str = declared("choice", default="recommended", choices=("recommended", "minimum-viable"), flag="--pick",
                         group="export", example="minimum-viable",
                         help="without layout flags, which layout of 'plan --suggest' to export: the recommended "
                              "one (the default) or the minimum viable one")
    torchtitan_version: str = declared("choice", default="0.3", choices=TORCHTITAN_VERSIONS,
                                       flag="--torchtitan-version", group="export", example="0.2",
                                       help="the torchtitan the config is for: 0.2 (0.2.x, a TOML job config), 0.3 "
                                            "(0.3.x, the current release: a Python config) or main")


@record(kw_only=True)
class CompareOptions:
    format: str = declared("choice", default="text", choices=FORMATS, flag="--format", group="output", api=False,
                           help="text, markdown or json")


@record(kw_only=True)
class InferOptions:
    """What is served (fitplan infer): the batch, the context, and the precisions."""
    batch: int = declared("int", default=1, flag="--batch", group="serving", lo=1, hi=2**20, example=8,
                          unit="sequences", help="sequences decoded at once")
    context: int | None = declared("int", default=None, flag="--context", group="serving", lo=1, hi=10**9,
                                   example=32768, unit="tokens",
                                   help="tokens each sequence holds in the KV cache, prompt and output "
                                        "(default: the model's max_seq_len)")
    weight_precision: str = declared("choice", default="bf16", choices=WEIGHT_PRECISIONS, flag="--weight-precision",
                                     group="serving", example="int4",
                                     help="bf16 2 B, fp8 and int8 1 B, int4 0.5 B per weight plus an fp16 scale "
                                          "and a 4-bit zero point per group of 128")
    kv_precision: str = declared("choice", default="bf16", choices=KV_PRECISIONS, flag="--kv-precision",
                                 group="serving", example="fp8", help="the KV cache's element: bf16 2 B, fp8 and "
                                                                      "int8 1 B")
    server: str | None = declared("choice", default=None, choices=SERVERS, flag="--server", group="server",
                                  example="vllm", help="also size the KV cache as this server does at start-up "
                                                       "(its pool, blocks, max context and batch, as it logs them)")
    gpu_memory_utilization: float | None = declared("number", default=None, flag="--gpu-memory-utilization",
                                                    group="server", lo=0.01, hi=1, example=0.85,
                                                    help="vLLM's share of the GPU for this instance (default 0.9)")
    max_num_batched_tokens: int | None = declared("int", default=None, flag="--max-num-batched-tokens", group="server",
                                                  lo=1, hi=2**24, example=4096, unit="tokens",
                                                  help="vLLM's tokens per step, the profile run's forward (default "
                                                       "8192 on GPUs of 70 GiB and more but A100, else 2048)")
    max_num_seqs: int | None = declared("int", default=None, flag="--max-num-seqs", group="server", lo=1, hi=2**20,
                                        example=128, unit="sequences",
                                        help="vLLM's requests per step, the sampler warm-up's (default 1024 on GPUs of "
                                             "70 GiB and more but A100, else 256)")
    mem_fraction_static: float | None = declared("number", default=None, flag="--mem-fraction-static",
                                                 group="server", lo=0.01, hi=0.99, example=0.8,
                                                 help="SGLang's share of the free memory for weights and KV cache "
                                                      "(default: from the GPU's memory, as SGLang sets it)")
    format: str = declared("choice", default="text", choices=FORMATS, flag="--format", group="output", api=False,
                           help="text, markdown or json")


@record(kw_only=True)
class CalibrateOptions:
    """What `fitplan calibrate` measures, and the GPU spec file it writes (fitplan.calibrate)."""
    output: str = declared("str", flag="--output", group="calibrate", api=False,
                           help="the GPU spec file (TOML [gpu]) to write; --gpu-spec or --spec loads it")
    runs: str | None = declared("str", default=None, flag="--runs", group="calibrate", api=False,
                                help="a TOML file of measured runs ([[run]] flags = \"...\", tokens_per_s_per_gpu "
                                     "or step_s): fit the end-to-end constants on them instead of measuring here "
                                     "(no GPU or torch needed)")
    device: str = declared("choice", default="auto", choices=("auto", "cuda", "cpu"), flag="--device",
                           group="calibrate", example="cpu", help="where to measure (auto: CUDA when torch sees "
                                                                  "it, else the CPU)")
    iterations: int = declared("int", default=10, flag="--iterations", group="calibrate", lo=1, hi=10000, example=3,
                               help="timed repetitions of each GEMM and collective, after 2 warm-up runs")
    message_bytes: int | None = declared("size", default=None, key="message", flag="--message", group="calibrate",
                                         lo="1 KiB", hi="64 GiB", example="8 MiB",
                                         help='bytes per rank in each bandwidth collective, e.g. "256 MiB" '
                                              '(default: 256 MiB on CUDA, 4 MiB on the CPU)')
    format: str = declared("choice", default="text", choices=("text", "json"), flag="--format", group="output",
                           api=False, help="the report of what was measured: text or json")


# The roots of each command: (name, class). Spec roots come first; their flags set spec fields.
SPEC_ROOTS = (("source", ModelSource), ("model", ModelSpec), ("training", TrainingSpec), ("cluster", ClusterSpec))
COMMANDS = {
    "plan": SPEC_ROOTS + (("config", ParallelConfig), ("search", SearchOptions), ("plan", PlanOptions)),
    "export": SPEC_ROOTS + (("config", ParallelConfig), ("search", SearchOptions), ("export", ExportOptions)),
    "sweep": SPEC_ROOTS + (("config", ParallelConfig), ("search", SearchOptions), ("sweep", SweepOptions)),
    "compare": SPEC_ROOTS + (("config", ParallelConfig), ("compare", CompareOptions)),
    # serving has no training spec: the model, the GPUs, the instance's tp x pp and what is served
    "infer": (("source", ModelSource), ("model", ModelSpec), ("cluster", ClusterSpec), ("config", ParallelConfig),
              ("infer", InferOptions)),
    # measure this machine at the model's GEMM shapes (its --tp and --micro-batch) and write a [gpu] table
    "calibrate": SPEC_ROOTS + (("config", ParallelConfig), ("calibrate", CalibrateOptions)),
}
COMMANDS["search"] = COMMANDS["plan"]
# Commands that take only some configuration flags: compare lays out its own configurations (of
# the flags it takes only the micro-batch); infer plans one tp x pp instance; calibrate measures
# the GEMMs of one tp x cp x ep layout at one micro-batch.
CONFIG_SUBSETS = {"compare": ("micro_batch",), "infer": ("tp", "pp"), "calibrate": ("tp", "cp", "ep", "micro_batch")}


@functools.cache
def command_flags(command: str) -> tuple[Flagged, ...]:
    """Every flag a command takes, in declaration order."""
    out = []
    for root, cls in COMMANDS[command]:
        flags = flagged(cls, root)
        if (root, cls) not in SPEC_ROOTS + (("config", ParallelConfig),):   # an option without a default is required
            defaults = {f.name: f.default for f in fields(cls)}
            flags = [replace(f, required=defaults[f.path[1]] is MISSING) for f in flags]
        if command in CONFIG_SUBSETS and root == "config":
            flags = [f for f in flags if f.path[-1] in CONFIG_SUBSETS[command]]
        out += flags
    return tuple(out)


def api_flags(command: str) -> dict[str, Flagged]:
    """The request keys the JSON API takes for a command (no paths on the server's disk)."""
    return {f.key: f for f in command_flags(command) if f.decl.api}


@record(kw_only=True)
class Request:
    """One question: the command, the values given (request key -> plain value), and a
    pasted Hugging Face config.json (the web page's; the CLI names a file instead)."""
    command: str
    values: dict = field(default_factory=dict)
    hf_text: str | None = None
    hf_name: str = "hf-model"

    def get(self, key: str, default=None):
        value = self.values.get(key)
        return default if value is None else value


def options(cls, request: Request):
    """An option class filled from the request, its declared defaults where nothing was given; a
    size, rate or time given as text ("8 MiB") read by its unit."""
    return cls(**{f.path[1]: _unit_value(f, checked(f, request.values[f.key])) for f in flagged(cls, "x")
                  if request.values.get(f.key) is not None})


def _unit_value(f: Flagged, value):
    parse = UNIT_PARSERS.get(f.decl.kind)
    if parse is None or not isinstance(value, str):
        return value
    parsed = parse(value, f.flag)
    problem = out_of_range(f.decl, f.flag, parsed, shown=repr(value))
    if problem:
        raise SpecError(problem)
    return parsed


def checked(f: Flagged, value):
    """A request value within its declared choices and range, else a SpecError naming the
    flag: the one check the command line and the JSON API share."""
    d = f.decl
    if d.kind in ("enum", "choice") and value not in d.choice_values:
        raise SpecError(f"{f.flag}: invalid choice {value!r}; choose from {', '.join(map(str, d.choice_values))}")
    for item in (value if d.kind == "ints" else (value,)):
        if d.kind not in UNIT_PARSERS:   # a size, rate or time is checked once parsed (fitplan.resolve.typed)
            problem = out_of_range(d, f.flag, item * d.scale if d.scale != 1 else item, shown=num_text(item))
            if problem:
                raise SpecError(problem)
    return value
