"""Turn command-line values into specs. Shared by every subcommand; raises SpecError.

Where a value comes from, highest first: a flag; a spec file (--spec, TOML or JSON);
a Hugging Face config (--hf-config) or a model preset (--preset); built-in defaults.
"""
from dataclasses import replace

from fitplan import presets
from fitplan.errors import SpecError
from fitplan.memory.breakdown import Setup
from fitplan.presets.models import ModelPreset
from fitplan.presets.recipes import DEFAULT_RECIPE
from fitplan.specs import ClusterSpec, ModelSpec, TrainingSpec, compat
from fitplan.specs.parallel import ParallelConfig, Recompute, ZeroStage
from fitplan.specs.model import Mlp, MoeSpec, Norm, Position
from fitplan.units import parse_bytes, parse_rate

CONFIG_FLAGS = ("tp", "pp", "dp", "cp", "ep", "zero", "sequence_parallel", "recompute", "virtual_stages")
SHAPE_FLAGS = {"layers": "num_layers", "hidden": "hidden_size", "heads": "num_heads", "kv_heads": "num_kv_heads",
               "ffn": "ffn_hidden_size", "vocab": "vocab_size", "params": "published_params"}


def add_model_args(parser, *, gpus_required: bool = True) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--preset", help="model preset, e.g. gpt3-175b (fitplan presets list)")
    g.add_argument("--hf-config", help="a Hugging Face config.json, or a folder holding one")
    g.add_argument("--spec", help="a TOML or JSON spec file with [model], [training], [gpu] and/or [cluster]")
    g.add_argument("--layers", type=int)
    g.add_argument("--hidden", type=int)
    g.add_argument("--heads", type=int)
    g.add_argument("--kv-heads", type=int, help="key/value heads (grouped-query attention); default: --heads")
    g.add_argument("--ffn", type=int, help="MLP hidden size; default 4*hidden for gelu")
    g.add_argument("--vocab", type=int)
    g.add_argument("--mlp", choices=[m.value for m in Mlp])
    tied = g.add_mutually_exclusive_group()
    tied.add_argument("--tied-embeddings", dest="tied", action="store_const", const=True)
    tied.add_argument("--untied-embeddings", dest="tied", action="store_const", const=False)
    g.add_argument("--params", type=int, help="a published parameter count to use instead of the shape-derived one")
    g.add_argument("--experts", type=int, help="routed experts per MoE layer (makes the model mixture-of-experts)")
    g.add_argument("--experts-per-token", type=int, help="top-k routing")
    g.add_argument("--expert-ffn", type=int, help="each expert's MLP size (default --ffn)")
    g.add_argument("--shared-experts", type=int, help="experts every token uses (DeepSeek)")
    g.add_argument("--first-dense-layers", type=int, help="leading layers with a dense MLP")
    g.add_argument("--capacity-factor", type=float, help="MoE capacity factor (default: dropless)")
    t = parser.add_argument_group("training")
    t.add_argument("--seq-len", type=int)
    t.add_argument("--micro-batch", type=int)
    t.add_argument("--global-batch", type=int)
    t.add_argument("--precision", help=f"precision recipe (default {DEFAULT_RECIPE}; fitplan presets list)")
    for comp in ("weight", "grad", "master", "optimizer"):
        t.add_argument(f"--{comp}-bytes", type=float, help=f"custom {comp} bytes per parameter")
    t.add_argument("--act-bytes", type=int, choices=(1, 2, 4), help="bytes per stored activation (default 2)")
    t.add_argument("--no-dropout", action="store_true", help="train without dropout (no masks stored)")
    t.add_argument("--attention-kernel", choices=("eager", "flash"),
                   help="eager stores the s^2 scores; flash keeps only an fp32 logsumexp (default eager)")
    t.add_argument("--moe-imbalance", type=float,
                   help="dropless MoE: the busiest expert rank's tokens over the mean (default 1.0)")
    c = parser.add_argument_group("cluster")
    c.add_argument("--gpus", type=int, required=gpus_required, help="number of GPUs")
    c.add_argument("--gpu", help="GPU preset (default: the model preset's, else h100-80gb)")
    c.add_argument("--gpu-memory", help='memory per GPU, e.g. "192 GiB"')
    c.add_argument("--reserve", help='memory held back per GPU, e.g. "10 GiB"')
    c.add_argument("--gpus-per-node", type=int)
    c.add_argument("--intra-node-bandwidth", help='per-GPU link inside a node, one direction, e.g. "450 GB/s"')
    c.add_argument("--inter-node-bandwidth", help='per-GPU link between nodes, one direction, e.g. "50 GB/s"')


def _spec_file(args):
    if not args.spec:
        return None
    from fitplan.files.load import load_specs
    return load_specs(args.spec)


def _base_model(args, spec) -> tuple[ModelSpec | None, ModelPreset | None]:
    sources = [name for name, given in (("--preset", args.preset), ("--hf-config", args.hf_config),
                                        ("--spec [model]", spec is not None and spec.model is not None)) if given]
    if len(sources) > 1:
        raise SpecError(f"{sources[1]}: the model is already given by {sources[0]}; give one model source")
    if args.preset:
        preset = presets.model(args.preset)
        return preset.model, preset
    if args.hf_config:
        from fitplan.files.hf import model_from_hf_config
        return model_from_hf_config(args.hf_config), None
    return (spec.model if spec is not None else None), None


def _with_experts(args, model: ModelSpec) -> ModelSpec:
    """--experts and friends add or change a [model.moe] table."""
    flags = {"num_experts": args.experts, "experts_per_token": args.experts_per_token,
             "expert_ffn_size": args.expert_ffn, "num_shared_experts": args.shared_experts,
             "first_dense_layers": args.first_dense_layers, "capacity_factor": args.capacity_factor}
    given = {k: v for k, v in flags.items() if v is not None}
    if not given:
        return model
    if model.moe is None:
        if args.experts is None or args.experts_per_token is None:
            raise SpecError("--experts: a mixture-of-experts model needs --experts and --experts-per-token")
        base = MoeSpec(num_experts=args.experts, experts_per_token=args.experts_per_token,
                       expert_ffn_size=args.expert_ffn or model.ffn_hidden_size)
    else:
        base = model.moe
    return replace(model, moe=replace(base, **given), published_params=None,
                   name=model.name if model.name.endswith("(modified)") or model.name == "custom"
                   else model.name + " (modified)")


def _model(args, spec) -> tuple[ModelSpec, ModelPreset | None]:
    model, preset = _model_shape(args, spec)
    return _with_experts(args, model), preset


def _model_shape(args, spec) -> tuple[ModelSpec, ModelPreset | None]:
    model, preset = _base_model(args, spec)
    given = {field: getattr(args, flag) for flag, field in SHAPE_FLAGS.items() if getattr(args, flag) is not None}
    if model is not None:
        if given or args.mlp or args.tied is not None:
            changes = dict(given)
            if "num_heads" in given and "num_kv_heads" not in given and model.num_kv_heads == model.num_heads:
                changes["num_kv_heads"] = given["num_heads"]
            if args.mlp:
                changes["mlp"] = Mlp(args.mlp)
            if args.tied is not None:
                changes["tied_embeddings"] = args.tied
            if "published_params" not in given:
                changes["published_params"] = None   # a changed shape invalidates the published count
            model = replace(model, name=model.name + " (modified)", **changes)
        return model, preset
    missing = [f"--{flag.replace('_', '-')}" for flag in ("layers", "hidden", "heads", "vocab")
               if getattr(args, flag) is None]
    if missing:
        raise SpecError(f"--preset: no model given; name a preset, --hf-config, --spec, or a custom shape "
                        f"({', '.join(missing)} missing)")
    if args.seq_len is None:
        raise SpecError("--seq-len: a custom model needs a sequence length, e.g. --seq-len 2048")
    mlp = Mlp(args.mlp or "gelu")
    if args.ffn is None and mlp is Mlp.SWIGLU:
        raise SpecError("--ffn: a swiglu MLP has no conventional size; give --ffn")
    gpt = mlp is Mlp.GELU
    model = ModelSpec(name="custom", num_layers=args.layers, hidden_size=args.hidden, num_heads=args.heads,
                      num_kv_heads=args.kv_heads or args.heads, ffn_hidden_size=args.ffn or 4 * args.hidden,
                      vocab_size=args.vocab, max_seq_len=args.seq_len, mlp=mlp,
                      norm=Norm.LAYERNORM if gpt else Norm.RMSNORM, position=Position.LEARNED if gpt else Position.ROPE,
                      tied_embeddings=gpt if args.tied is None else args.tied, linear_bias=gpt,
                      published_params=args.params, source="custom shape from flags")
    return model, None


def _recipe(args, base):
    recipe = presets.recipe(args.precision) if args.precision else base
    custom = {f"{name}_bytes": getattr(args, f"{flag}_bytes") for flag, name in
              (("weight", "weights"), ("grad", "grads"), ("master", "master")) if getattr(args, f"{flag}_bytes") is not None}
    if args.optimizer_bytes is not None:
        custom["moments"] = (("optimizer", args.optimizer_bytes),)
    if custom:
        recipe = replace(recipe, name=recipe.name + " (custom)", **{k: _whole(v) for k, v in custom.items()})
    return recipe


def _whole(value):
    if isinstance(value, tuple):
        return tuple((n, _whole(b)) for n, b in value)
    return int(value) if float(value).is_integer() else value


def _training(args, spec, preset, model) -> TrainingSpec:
    base = spec.training if spec is not None and spec.training is not None else None
    seq_len = args.seq_len if args.seq_len is not None else (base.seq_len if base else preset.seq_len if preset else None)
    if seq_len is None:
        raise SpecError(f"--seq-len: give the training sequence length (the model allows up to {model.max_seq_len})")
    if args.global_batch is not None:
        global_batch = args.global_batch
    else:
        global_batch = base.global_batch if base else (preset.global_batch if preset else None)
    default_recipe = base.recipe if base else presets.recipe(DEFAULT_RECIPE)
    return TrainingSpec(seq_len=seq_len, recipe=_recipe(args, default_recipe), global_batch=global_batch,
                        act_bytes=args.act_bytes or (base.act_bytes if base else 2),
                        dropout=False if args.no_dropout else (base.dropout if base else True),
                        attention_kernel=args.attention_kernel or (base.attention_kernel if base else "eager"),
                        moe_imbalance=args.moe_imbalance if args.moe_imbalance is not None else (
                            base.moe_imbalance if base else 1.0))


def _cluster(args, spec, preset) -> ClusterSpec:
    from_file = spec.cluster if spec is not None else None
    if args.gpu:
        gpu = presets.gpu(args.gpu)
    elif from_file is not None:
        gpu = from_file.gpu
    elif spec is not None and spec.gpu is not None:
        gpu = spec.gpu
    else:
        gpu = presets.gpu(preset.gpu if preset else "h100-80gb")
    if args.gpu_memory is not None:
        gpu = replace(gpu, name=gpu.name + " (custom memory)", memory_bytes=parse_bytes(args.gpu_memory, "--gpu-memory"))
    for flag, tier in (("intra_node_bandwidth", "intra_node"), ("inter_node_bandwidth", "inter_node")):
        if getattr(args, flag) is not None:
            rate = parse_rate(getattr(args, flag), "--" + flag.replace("_", "-"))
            link = getattr(gpu, tier)
            gpu = replace(gpu, **{tier: replace(link, name=f"{link.name} at {rate / 1e9:g} GB/s", bytes_per_s=rate)})
    if args.reserve is not None:
        reserve = parse_bytes(args.reserve, "--reserve")
    else:
        reserve = from_file.reserve_bytes if from_file is not None and not args.gpu else gpu.default_reserve_bytes
    num_gpus = args.gpus if args.gpus is not None else (from_file.num_gpus if from_file is not None else None)
    if num_gpus is None:
        raise SpecError("--gpus: say how many GPUs, e.g. --gpus 8")
    per_node = args.gpus_per_node if args.gpus_per_node is not None else (
        from_file.gpus_per_node if from_file is not None else gpu.gpus_per_node)
    return ClusterSpec(gpu=gpu, num_gpus=num_gpus, gpus_per_node=per_node, reserve_bytes=reserve)


def setup_from_args(args) -> tuple[Setup, int]:
    """The Setup and the requested micro-batch."""
    spec = _spec_file(args)
    model, preset = _model(args, spec)
    training = _training(args, spec, preset, model)
    cluster = _cluster(args, spec, preset)
    micro_batch = args.micro_batch if args.micro_batch is not None else (preset.micro_batch if preset else 1)
    if micro_batch < 1:
        raise SpecError(f"--micro-batch must be >= 1, got {micro_batch}")
    return Setup(model, training, cluster), micro_batch


def explicit_config(args) -> bool:
    return any(getattr(args, k) is not None for k in CONFIG_FLAGS)


def config_from_args(args, setup, micro_batch) -> ParallelConfig:
    given = lambda value: 1 if value is None else value
    tp, pp, cp = given(args.tp), given(args.pp), given(args.cp)
    for flag, value in (("--tp", tp), ("--pp", pp), ("--cp", cp), ("--ep", given(args.ep)),
                        ("--virtual-stages", given(args.virtual_stages))):
        _at_least_one(flag, value)
    n = setup.cluster.num_gpus
    dp = args.dp
    if dp is None:
        if n % (tp * pp * cp):
            raise SpecError(f"--gpus {n} is not divisible by tp x pp x cp = {tp * pp * cp}; change the degrees")
        dp = n // (tp * pp * cp)
    config = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, zero=ZeroStage(args.zero or 0),
                            sequence_parallel=bool(args.sequence_parallel),
                            recompute=Recompute(args.recompute or "none"), micro_batch=micro_batch,
                            virtual_stages=given(args.virtual_stages), ep=given(args.ep))
    compat.require(setup.model, setup.training, setup.cluster, config, allow_cross_node_tp=args.allow_cross_node_tp)
    return config


def _at_least_one(flag: str, value: int) -> None:
    if value < 1:
        raise SpecError(f"{flag} must be >= 1, got {value}")
    if value > 10**9:
        raise SpecError(f"{flag} = {value} is absurdly large (limit 1,000,000,000); check the value")


def space_from_args(args, setup, micro_batch):
    from fitplan.search import default_space   # NumPy is loaded only by the search
    _at_least_one("--max-cp", args.max_cp)
    n = setup.cluster.num_gpus
    space = default_space(n, micro_batch=micro_batch, max_cp=args.max_cp, allow_cross_node_tp=args.allow_cross_node_tp,
                          num_experts=setup.model.moe.num_experts if setup.model.moe else 0)
    fixed = {}
    for flag in ("tp", "pp", "cp", "virtual_stages", "ep"):
        if getattr(args, flag) is not None:
            _at_least_one("--" + flag.replace("_", "-"), getattr(args, flag))
            fixed[flag] = (getattr(args, flag),)
    if args.zero is not None:
        fixed["zero"] = (ZeroStage(args.zero),)
    if args.recompute is not None:
        fixed["recompute"] = (Recompute(args.recompute),)
    if args.sequence_parallel:
        fixed["sequence_parallel"] = (True,)
    if args.dp is not None:
        raise SpecError("--dp: with --suggest the data-parallel degree follows from the others; drop --dp")
    return replace(space, **fixed)


SMALLEST_TRIES = 64
MAX_GPUS = 10**9   # ClusterSpec's limit


def smallest_fitting(setup, args, micro_batch, start: int) -> dict:
    """The smallest GPU count from the lower bound upwards where the search finds a fit,
    in general and among powers of two. Bounded: at most SMALLEST_TRIES counts each, and
    never past MAX_GPUS."""

    from fitplan.search import search
    seen: dict = {}

    def fits(n: int) -> bool:
        if n not in seen:
            s = replace(setup, cluster=replace(setup.cluster, num_gpus=n))
            seen[n] = search(s, space_from_args(args, s, micro_batch), top=1).feasible
        return seen[n]

    start = max(start, 1)
    general = next((n for n in range(start, min(start + SMALLEST_TRIES, MAX_GPUS + 1)) if fits(n)), None)
    powers = [1 << k for k in range((start - 1).bit_length(), MAX_GPUS.bit_length()) if (1 << k) <= MAX_GPUS]
    power = next((p for p in powers[:SMALLEST_TRIES] if fits(p)), None)
    return {"general": general, "power_of_two": power, "searched_up_to": max(seen) if seen else start}
