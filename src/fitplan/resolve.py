"""A Request's values become specs. Shared by every front end; raises SpecError.

Where a value comes from, highest first: a flag (or a request field); a spec file (--spec,
TOML or JSON); a Hugging Face config (--hf-config, or pasted on the page) or a model preset
(--preset); built-in defaults. Which flag sets which field, and how its value is read, is
each field's declaration (fitplan.specs.declare); this module holds only the rules that
tie fields together (a custom shape's defaults, kv heads that follow heads, a changed
shape dropping the published count).

This module reads the files a request names, so it sits outside the pure core.
"""
from dataclasses import fields, replace

from fitplan import presets
from fitplan.errors import SpecError
from fitplan.memory.breakdown import Setup
from fitplan.presets.frameworks import FRAMEWORKS
from fitplan.presets.recipes import DEFAULT_RECIPE
from fitplan.record import record
from fitplan.request import InferOptions, ModelSource, Request, SearchOptions, checked, command_flags, options
from fitplan.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec, compat
from fitplan.specs.model import MambaSpec, MlaSpec, Mlp, MoeSpec, Norm, Position, QkNorm
from fitplan.specs.parallel import SETTINGS, Offload, Recompute, ZeroStage
from fitplan.specs.declare import out_of_range, spec_fields
from fitplan.units import UNIT_PARSERS, fmt_rate

DEFAULT_GPU = "h100-80gb"
AXES = ("tp", "pp", "cp", "ep", "virtual_stages", "zero", "recompute", "sequence_parallel", "offload")


@record(slots=True)
class Resolved:
    """The specs a request names: the setup, the requested micro-batch, the configuration
    fields given (field -> typed value), and the search's options."""
    setup: Setup
    micro_batch: int
    config: dict
    search: SearchOptions
    settings: dict = None     # the framework profile's settings no flag gave (fitplan.presets.frameworks)


def given(request: Request, root: str) -> dict:
    """The request's values for one root, as typed field values keyed by their path below it
    (('moe', 'num_experts'), ('intra_node', 'bytes_per_s'), ...)."""
    out = {}
    for f in command_flags(request.command):
        if f.path[0] == root and request.values.get(f.key) is not None:
            out[f.path[1:]] = typed(f, request.values[f.key])
    return out


def typed(f, value):
    """A request's plain value as its field holds it, read by the field's declaration."""
    kind, d = f.decl.kind, f.decl
    value = checked(f, value)
    if kind == "enum":
        return d.enum(value)
    parse = UNIT_PARSERS.get(kind)
    if parse is not None:
        parsed = parse(value, f.flag)
        problem = out_of_range(d, f.flag, parsed, shown=repr(value))
        if problem:
            raise SpecError(problem)
        return parsed
    if kind == "recipe":
        return presets.recipe(value)
    if kind == "gpu":
        return presets.gpu(value)
    if kind == "moments":
        return (("optimizer", _whole(value)),)
    if kind == "number" and f.path[-1].endswith("_bytes"):
        return _whole(value)
    return value * d.scale if d.scale != 1 else value


def _whole(value):
    return int(value) if float(value).is_integer() else value


def _spec_file(request: Request):
    path = request.get("spec")
    if not path:
        return None
    from fitplan.files.load import load_specs
    return load_specs(path)


def _base_model(request: Request, spec) -> tuple[ModelSpec | None, object, dict]:
    """The model, its preset (if any) and what a Hugging Face config says of its training."""
    source = options(ModelSource, request)
    hf = source.hf_config is not None or request.hf_text is not None
    sources = [name for name, present in (("--preset", source.preset), ("--hf-config", hf),
                                          ("--spec [model]", spec is not None and spec.model is not None)) if present]
    if len(sources) > 1:
        raise SpecError(f"{sources[1]}: the model is already given by {sources[0]}; give one model source")
    if source.preset:
        preset = presets.model(source.preset)
        return preset.model, preset, {}
    if request.hf_text is not None:
        from fitplan.files.hf import model_from_hf_text, training_hints
        model = model_from_hf_text(request.hf_text, where=f"{request.hf_name}/config.json", name=request.hf_name)
        return model, None, training_hints(request.hf_text)
    if source.hf_config is not None:
        from fitplan.files.hf import load_hf_config
        model, hints = load_hf_config(source.hf_config)
        return model, None, hints
    return (spec.model if spec is not None else None), None, {}


def _custom_model(request: Request, values: dict) -> ModelSpec:
    """A model from shape flags alone: GPT-like (LayerNorm, learned positions, biases, tied)
    for a GeLU MLP, Llama-like otherwise; any flag overrides those defaults."""
    missing = [f"--{flag}" for flag, name in (("layers", "num_layers"), ("hidden", "hidden_size"),
                                              ("heads", "num_heads"), ("vocab", "vocab_size")) if (name,) not in values]
    if missing:
        raise SpecError(f"--preset: no model given; name a preset, --hf-config, --spec, or a custom shape "
                        f"({', '.join(missing)} missing)")
    serving = request.command == "infer"   # no training: the served context sizes the model instead
    seq_len = request.get("context" if serving else "seq_len")
    if seq_len is None:
        flag = "--context" if serving else "--seq-len"
        raise SpecError(f"{flag}: a custom model needs a {'context' if serving else 'sequence length'}, "
                        f"e.g. {flag} 2048")
    mlp = values.get(("mlp",), Mlp.GELU)
    if ("ffn_hidden_size",) not in values and mlp.gated:
        raise SpecError(f"--ffn: a {mlp.value} MLP has no conventional size; give --ffn")
    gpt = mlp is Mlp.GELU
    hidden, heads = values[("hidden_size",)], values[("num_heads",)]
    shape = dict(num_kv_heads=heads, ffn_hidden_size=4 * hidden, max_seq_len=seq_len, mlp=mlp,
                 norm=Norm.LAYERNORM if gpt else Norm.RMSNORM, position=Position.LEARNED if gpt else Position.ROPE,
                 tied_embeddings=gpt, linear_bias=gpt)
    shape.update({path[0]: v for path, v in values.items() if len(path) == 1})
    if "layer_pattern" in shape:   # a hybrid model from flags: its length is the layer count, its tables built with it
        shape.setdefault("num_layers", len(shape["layer_pattern"]))
        shape.update(_tables(None, values, shape.get("ffn_hidden_size", 4 * hidden)))
    return ModelSpec(name="custom", source="custom shape from flags", **shape)


def _model(request: Request, spec) -> tuple[ModelSpec, object, dict]:
    model, preset, hints = _base_model(request, spec)
    values = given(request, "model")
    if model is None:
        model = _custom_model(request, values)
    else:
        changes = {path[0]: v for path, v in values.items() if len(path) == 1}
        if changes:
            if "num_heads" in changes and "num_kv_heads" not in changes and model.num_kv_heads == model.num_heads:
                changes["num_kv_heads"] = changes["num_heads"]   # multi-head attention stays multi-head
            if "layer_pattern" in changes and "num_layers" not in changes:   # a new pattern sets the layer count
                changes["num_layers"] = len(changes["layer_pattern"])
            changes.setdefault("published_params", None)        # a changed shape invalidates the published count
            # the tables change with the shape, so a new pattern and the Mamba or MoE table it needs arrive together
            changes.update(_tables(model, values, changes.get("ffn_hidden_size", model.ffn_hidden_size)))
            model = replace(model, name=_modified(model.name), **changes)
    return _with_tables(model, values), preset, hints


def _modified(name: str) -> str:
    return name if name.endswith("(modified)") or name == "custom" else name + " (modified)"


TABLE_NAMES = {"moe": "mixture-of-experts", "mla": "latent-attention", "mamba": "hybrid Mamba"}


def _table_kinds(ffn: int) -> tuple:
    return (("moe", MoeSpec, ("num_experts", "experts_per_token"), {"expert_ffn_size": ffn}),
            ("mla", MlaSpec, ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
             {"q_lora_rank": 0}),
            ("mamba", MambaSpec, ("num_heads", "head_dim", "state_size"), {}))


def _tables(model: ModelSpec | None, values: dict, ffn: int) -> dict:
    """The tables (--experts and friends: [model.moe]; --kv-lora-rank and friends: [model.mla];
    --mamba-heads and friends: [model.mamba]) the flags add or change, as fields to set."""
    out = {}
    for table, cls, needed, defaults in _table_kinds(ffn):
        given_here = {path[1]: v for path, v in values.items() if path[0] == table}
        if not given_here:
            continue
        current = None if model is None else getattr(model, table)
        if current is None:
            absent = [n for n in needed if n not in given_here]
            if absent:
                flags = {f.path[-1]: f.flag for f in command_flags("plan") if f.path[:2] == ("model", table)}
                raise SpecError(f"{flags[absent[0]]}: a {TABLE_NAMES[table]} model needs "
                                f"{' and '.join(flags[n] for n in needed)}")
            current = cls(**{**defaults, **given_here})
        out[table] = replace(current, **given_here)
    return out


def _with_tables(model: ModelSpec, values: dict) -> ModelSpec:
    """--experts and friends add or change the [model.moe] table, --kv-lora-rank and friends
    the [model.mla] table, --mamba-heads and friends the [model.mamba] table (when no other
    shape flag changed them with the shape: _model)."""
    tables = {k: v for k, v in _tables(model, values, model.ffn_hidden_size).items() if getattr(model, k) != v}
    if not tables:
        return model
    return replace(model, **tables, published_params=None, name=_modified(model.name))


def _recipe(request: Request, base):
    values = given(request, "training")
    recipe = values.get(("recipe",), base)
    custom = {path[1]: v for path, v in values.items() if path[0] == "recipe" and len(path) == 2}
    if custom:
        recipe = replace(recipe, name=recipe.name + " (custom)", **custom)
    return recipe


# With no global batch given or published: Llama 3's first batch, 4M tokens per step
# (Llama 3 Herd Sec. 3.4.1: 4M tokens of 4,096-token sequences), in whole sequences.
DEFAULT_TOKENS_PER_STEP = 4 * 2**20
FINETUNE_GLOBAL_BATCH = 16   # sequences: QLoRA's Guanaco fine-tunes (Dettmers et al. 2023)


def default_global_batch(seq_len: int) -> int:
    return max(1, DEFAULT_TOKENS_PER_STEP // seq_len)


def _training(request: Request, spec, preset, model, hints: dict) -> tuple[TrainingSpec, tuple[str, ...]]:
    """The training spec, and a line for each default it took instead of a given value."""
    base = spec.training if spec is not None and spec.training is not None else None
    values = {path[0]: v for path, v in given(request, "training").items() if len(path) == 1 and path[0] != "recipe"}
    seq_len = values.get("seq_len", base.seq_len if base else preset.seq_len if preset else None)
    if seq_len is None:
        raise SpecError(f"--seq-len: give the training sequence length (the model allows up to {model.max_seq_len})")
    assumed = []
    if base is None:
        if preset is not None:
            kernel, dropout, trained = (preset.attention_kernel, preset.dropout,
                                         f"how the {preset.model.name} preset trains")
        elif hints:
            kernel, dropout, trained = "flash", hints["dropout"], "the config.json's dropout rates; a flash kernel"
        else:
            kernel, dropout, trained = "flash", False, "fitplan's defaults for a model from flags"
        start = TrainingSpec(seq_len=seq_len, recipe=presets.recipe(DEFAULT_RECIPE), attention_kernel=kernel,
                             dropout=dropout, global_batch=preset.global_batch if preset else None,
                             moe_dispatcher=preset.moe_dispatcher if preset else "alltoall",
                             fp8_weight_cache=preset.fp8_weight_cache if preset else True)
        framework = FRAMEWORKS.get(values.get("framework"))
        kernel_taken = "attention_kernel" not in values and not (framework and "attention_kernel" in framework.training)
        taken = ([f"attention kernel {kernel}"] if kernel_taken else []) + (
            [f"dropout {'on' if dropout else 'off'}"] if "dropout" not in values else [])
        if taken:
            assumed.append(f"{', '.join(taken)}: {trained} (--attention-kernel, --dropout/--no-dropout set them)")
        fine_tuning = values.get("finetune", "full") != "full"
        if "global_batch" not in values and start.global_batch is not None and not fine_tuning:
            assumed.append(f"global batch {start.global_batch} sequences: the preset's "
                           f"({preset.batch_source or preset.model.source})")
    else:
        start = base
    training = replace(start, **{**values, "seq_len": seq_len, "recipe": _recipe(request, start.recipe)})
    training, line = _framework_training(training, values, base)
    if line:
        assumed.append(line)
    _check_bf16_layers(training, model)
    given_lora = [flag for flag, key in (("--lora-rank", "lora_rank"), ("--lora-targets", "lora_targets"),
                                         ("--base-precision", "base_precision")) if key in values]
    if given_lora and training.finetune == "full":
        raise SpecError(f"{given_lora[0]}: adapters need --finetune lora or qlora (this plan trains every weight)")
    if training.finetune != "full" and "global_batch" not in values and (base is None or base.global_batch is None):
        # an adapter fine-tune runs at a fine-tuning batch, not the base model's pre-training one
        training = replace(training, global_batch=FINETUNE_GLOBAL_BATCH)
        assumed.append(f"global batch {FINETUNE_GLOBAL_BATCH} sequences: a fine-tuning batch, QLoRA's for its "
                       f"Guanaco fine-tunes of 7B to 65B (Dettmers et al. 2023, arXiv:2305.14314), not the "
                       f"pre-training batch; --global-batch sets it")
    if training.global_batch is None:   # every comparison runs at one batch (issue 18)
        training = replace(training, global_batch=default_global_batch(seq_len))
        assumed.append(f"global batch {training.global_batch} sequences: fitplan's default of "
                       f"{DEFAULT_TOKENS_PER_STEP // 2**20}M tokens per step (Llama 3's first batch), none "
                       f"being given or published; --global-batch sets it")
    return training, tuple(assumed)


def _check_bf16_layers(training: TrainingSpec, model: ModelSpec) -> None:
    """Layers kept in bf16 exist only beside low-precision ones, and only as many as the model has; fp8
    attention only in a low-precision recipe's fused kernel."""
    first, last = training.bf16_first_layers, training.bf16_last_layers
    flag = "--bf16-last-layers" if last else "--bf16-first-layers"
    if (first or last) and training.recipe.compute == "bf16":
        raise SpecError(f"{flag}: every GEMM is bf16 already; give --compute-precision fp8, mxfp8 or nvfp4, or drop "
                        f"{flag}")
    if training.attention_precision == "fp8" and training.recipe.compute == "bf16":
        raise SpecError("--attention-precision fp8: Transformer Engine runs fp8 attention inside a low-precision "
                        "recipe; give --compute-precision fp8, mxfp8 or nvfp4, or drop it")
    if training.attention_precision == "fp8" and training.attention_kernel == "eager":
        raise SpecError("--attention-precision fp8: fp8 attention is a fused kernel (cuDNN's); give --attention-kernel "
                        "flash or cudnn, or drop it")
    if first + last > model.num_layers:
        raise SpecError(f"{flag}: {first} first + {last} last layers kept in bf16 exceed the model's "
                        f"{model.num_layers}; give at most {model.num_layers} in all")


def _framework_training(training: TrainingSpec, given_values: dict, base) -> tuple[TrainingSpec, str]:
    """The framework profile's training defaults (fitplan.presets.frameworks) wherever no flag set the field,
    nor a spec file (a spec-file value other than the field's own default), and the `assumed` line naming them."""
    if training.framework is None:
        return training, ""
    profile = FRAMEWORKS[training.framework]
    declared_default = {f.name: f.default for f in fields(TrainingSpec)}
    changes = {}
    for name, default in profile.training.items():
        if name in given_values or (base is not None and getattr(base, name) != declared_default[name]):
            continue
        changes[name] = default.value
    if not changes:
        return training, ""
    shown = ", ".join(f"{name.replace('_', ' ')} {_shown(value)}" for name, value in changes.items())
    return replace(training, **changes), (f"framework {profile.name}: {shown} (its defaults, each cited in "
                                         f"docs/frameworks.md; a flag sets any of them)")


def _shown(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int) and value >= 2**20:
        return f"{value / 2**20:,.0f} MiB" if value % 2**20 == 0 else f"{value / 1e6:,.0f} MB"
    return str(value)


def framework_settings(training: TrainingSpec, config: dict) -> dict:
    """The framework profile's configuration settings (overlaps) that no flag gave."""
    if training.framework is None:
        return {}
    return {name: d.value for name, d in FRAMEWORKS[training.framework].config.items() if name not in config}


def _gpu(request: Request, spec, preset):
    from_file = spec.cluster if spec is not None else None
    values = given(request, "cluster")
    gpu_file = request.get("gpu_spec")
    if gpu_file and ("gpu",) in values:
        raise SpecError(f"--gpu-spec: the GPU is already given by --gpu {request.get('gpu')}; give one of them")
    if ("gpu",) in values:
        gpu = values[("gpu",)]
    elif gpu_file:
        from fitplan.files.load import load_gpu
        gpu = load_gpu(gpu_file)
    elif from_file is not None:
        gpu = from_file.gpu
    elif spec is not None and spec.gpu is not None:
        gpu = spec.gpu
    else:
        gpu = presets.gpu(preset.gpu if preset else DEFAULT_GPU)
    changes = {path[1]: v for path, v in values.items() if path[0] == "gpu" and len(path) == 2}
    asked = tuple(changes)   # the fields the flags name (the ones below follow from them)
    if "efficiency" in changes and "efficiency_fp8" not in changes:
        changes["efficiency_fp8"] = None   # one --gemm-efficiency sets every GEMM's ceiling, as it always did
    if "hbm_bytes_per_s" in changes and "gemm_bandwidth_bytes_per_s" not in changes \
            and gpu.gemm_bandwidth_bytes_per_s is not None and gpu.hbm_bytes_per_s is not None:
        # the fitted operand bandwidth is the fraction of the HBM peak a GEMM's traffic reaches (H100 3.07 of
        # 3.35 TB/s): a new HBM peak keeps that fraction (bench/calibrate.py scales A100's W so), issue 25
        changes["gemm_bandwidth_bytes_per_s"] = gpu.gemm_bandwidth_bytes_per_s * (changes["hbm_bytes_per_s"]
                                                                                  / gpu.hbm_bytes_per_s)
    notes = []
    if changes:
        name, note = custom_gpu_name(gpu, changes, asked)
        gpu = replace(gpu, name=name, **changes)
        notes.append(note)
    for tier in ("intra_node", "inter_node"):
        link = {path[2]: v for path, v in values.items() if path[:2] == ("gpu", tier)}
        if link:
            old = getattr(gpu, tier)
            name = old.name + (f" at {fmt_rate(link['bytes_per_s'])}" if "bytes_per_s" in link else "") + (
                f" with {link['latency_s'] * 1e6:g} us latency" if "latency_s" in link else "")
            gpu = replace(gpu, **{tier: replace(old, name=name, **link)})
    return gpu, notes


# What a GPU preset states, by the fields each part is made of: a custom GPU keeps the parts no flag changed
GPU_PARTS = (("compute", ("peak_bf16_flops_per_s", "peak_fp8_flops_per_s", "peak_fp4_flops_per_s", "efficiency",
                          "efficiency_h0",
                          "efficiency_fp8", "gemm_overhead_s", "gemm_bandwidth_bytes_per_s")),
             ("HBM bandwidth", ("hbm_bytes_per_s",)), ("memory", ("memory_bytes",)))


def custom_gpu_name(gpu, changes: dict, asked: tuple) -> tuple[str, str]:
    """A GPU preset with fields changed by flags: its name says what changed and what the preset
    still gives ("h100-80gb with 24 GiB memory (h100-80gb compute, HBM bandwidth and links kept)"),
    and the assumption line says the same, so that a smaller card is not silently an H100."""
    def size(b):
        return f"{b / 2**30:g} GiB" if b % 2**27 == 0 else f"{b / 1e9:g} GB"
    flags = {f.name: d.flag for f, d in spec_fields(type(gpu))}
    said = [f"{size(changes['memory_bytes'])} memory" if name == "memory_bytes" else f"its own {flags.get(name) or name}"
            for name in asked]
    kept = [part for part, names in GPU_PARTS if not set(names) & set(changes)] + ["links"]
    kept_text = ", ".join(kept[:-1]) + " and " + kept[-1] if len(kept) > 1 else kept[0]
    name = f"{gpu.name} with {', '.join(said)} ({gpu.name} {kept_text} kept)"   # e.g. --gpu-memory alone
    return name, (f"GPU {name}: {', '.join(said)} from the flags; the {kept_text} are the {gpu.name} preset's "
                  f"(--peak-tflops, --hbm-bandwidth and the link flags change them, or --gpu names another part)")


def _cluster(request: Request, spec, preset) -> ClusterSpec:
    from_file = spec.cluster if spec is not None else None
    values = {path[0]: v for path, v in given(request, "cluster").items() if len(path) == 1 and path[0] != "gpu"}
    gpu, notes = _gpu(request, spec, preset)
    if "reserve_bytes" not in values:
        values["reserve_bytes"] = (from_file.reserve_bytes if from_file is not None and request.get("gpu") is None
                                   else gpu.default_reserve_bytes)
    if "num_gpus" not in values:
        if from_file is None:
            raise SpecError("--gpus: say how many GPUs, e.g. --gpus 8")
        values["num_gpus"] = from_file.num_gpus
    values.setdefault("gpus_per_node", from_file.gpus_per_node if from_file is not None else gpu.gpus_per_node)
    if from_file is not None:   # the rest (the price, the PUE) as the file says, where no flag gives them
        for f, _ in spec_fields(ClusterSpec):
            if f.name != "gpu":
                values.setdefault(f.name, getattr(from_file, f.name))
    return ClusterSpec(gpu=gpu, **values), tuple(notes)


def _attention_note(cluster, training, model) -> tuple:
    """The assumption line of fp8 attention: the measured rate it runs at, or that none was measured."""
    if training.attention_precision != "fp8":
        return ()
    from fitplan.timing import calibration as CAL
    arch, d = cluster.gpu.architecture, model.qk_head_dim
    fmt = {"mxfp8": "MXFP8", "fp8": "per-tensor fp8"}[CAL.fp8_attention_format(training.recipe.compute)]
    shape = "MLA" if model.mla is not None else f"head dim {d}"
    if CAL.fp8_attention_speedups(arch, d, model.mla is not None, training.recipe.compute) is None:
        return (f"fp8 attention ({fmt}): no fp8 measurement fitplan uses for {shape} on {arch}, so it runs at "
                f"bf16's rate (docs/calibration.md#fp8-attention); memory as bf16 attention",)
    return (f"fp8 attention ({fmt}) at cuDNN's measured speed over bf16 for {shape} on {arch} "
            f"(docs/calibration.md#fp8-attention); memory as bf16 attention (its fp8 copies of Q, K and V not "
            f"counted)",)


def _placement_note(cluster, training, model) -> tuple:
    """The assumption lines where fitplan's rank placement (fitplan.timing.comm.group_is_intra_node: nodes of G
    consecutive ranks, a group inside one only where its span divides G) sends a group over the network although the
    job's N GPUs all fit in one node: a span d that divides N but that the rule keeps off the node (64 of an NVL72
    rack's 72). The constants were fitted with the rule as it is (docs/calibration.md says why it stays), so it is
    said, not changed. DeepEP's dispatch is placed on the NVLink domains the job fills instead
    (fitplan.timing.axes.placement): where that puts an ep span inside a domain the node rule would not,
    a second line says so."""
    from fitplan.timing.comm import domain_ranks, group_is_intra_node   # the rules themselves, asked of each span
    N, G = cluster.num_gpus, cluster.gpus_per_node
    deepep = model.moe is not None and training.moe_dispatcher == "deepep"
    off = lambda d, g: not group_is_intra_node.fn(stride=1, n=d, G=g)
    listed = lambda spans: ", ".join(map(str, spans[:-1])) + (" or " if len(spans) > 1 else "") + str(spans[-1])
    out = []
    spans = [d for d in range(2, N + 1) if N % d == 0 and off(d, G)] if N <= G else []
    if spans:
        out.append(f"rank placement: a {'tp, cp' if deepep else 'tp, cp, ep'} or dp group spanning {listed(spans)} "
                   f"consecutive ranks is taken as crossing nodes (timed over {cluster.gpu.inter_node.name}) because "
                   f"{G} is not a multiple of its span, though the job's {N} GPUs fit in one {G}-GPU node "
                   f"(docs/calibration.md#where-the-fit-is-biased-and-what-was-ruled-out: the constants were fitted "
                   f"with this rule)")
    domain = domain_ranks.fn(N=N, G=G)
    moved = [d for d in range(2, domain + 1) if N % d == 0 and off(d, G) and not off(d, domain)] if deepep else []
    if moved:
        out.append(f"rank placement: DeepEP's expert dispatch is timed on NVLink domains of {domain} GPUs, the job's "
                   f"{N} filling them evenly, so an ep group spanning {listed(moved)} consecutive ranks stays on "
                   f"{cluster.gpu.intra_node.name} (HybridEP's measured rates across a rack's trays; "
                   f"docs/formulas.md#link-tier)")
    return tuple(out)


def resolve(request: Request) -> Resolved:
    """The Setup, the requested micro-batch, the configuration fields given and the search options."""
    spec = _spec_file(request)
    model, preset, hints = _model(request, spec)
    training, assumed = _training(request, spec, preset, model, hints)
    cluster, gpu_notes = _cluster(request, spec, preset)
    assumed = (model_assumptions(model, hints) + assumed + gpu_notes + _placement_note(cluster, training, model)
               + _attention_note(cluster, training, model))
    setup = Setup(model, training, cluster, assumed=assumed)
    config = {path[0]: v for path, v in given(request, "config").items()}
    micro_batch = config.pop("micro_batch", preset.micro_batch if preset else 1)
    if "zero" in config:
        config["zero"] = ZeroStage(config["zero"])
    if not config.get("sequence_parallel", True):
        del config["sequence_parallel"]   # off is the default: it fixes nothing
    return Resolved(setup=setup, micro_batch=micro_batch, config=config, search=options(SearchOptions, request),
                    settings=framework_settings(training, config))


def sliding_text(model: ModelSpec) -> str:
    every = model.full_attention_every
    suffix = "th" if every is None or 10 <= every % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(every % 10, "th")
    layers = "every layer" if every is None else f"all but every {every}{suffix} layer"
    return f"sliding window of {model.sliding_window:,} tokens on {layers}"


def model_assumptions(model: ModelSpec, hints: dict, *, serving: bool = False) -> tuple[str, ...]:
    """A line for each thing the model has that the formulas leave out, and what its config's
    reader left out (hints["notes"])."""
    out = list(hints.get("notes", ()))
    if not serving and model.norms_per_layer != 2:
        out.append(f"{model.norms_per_layer} norms per layer: activations count the inputs of two, as Korthikanti "
                   f"Table 2's layer has (the parameters count all {model.norms_per_layer})")
    if not serving and model.qk_norm is not QkNorm.NONE:
        out.append(f"query/key norms ({model.qk_norm.value}): their inputs are not counted in activations (the "
                   f"parameters count them)")
    if not serving and model.attention_sinks:
        out.append("attention sinks (a learned logit per head): counted in the parameters; their FLOPs (one more "
                   "score per query and head, no GEMM) and stored bytes (the flash kernel's logsumexp already "
                   "covers them) are left out")
    if model.sliding_window is not None:
        out.append(f"{sliding_text(model)} not modelled in "
                   + ("the KV cache: every layer caches the whole context" if serving else
                      "activations: full attention assumed"))
    return tuple(out)


def explicit_config(resolved: Resolved) -> bool:
    return bool(resolved.config)


def config_of(resolved: Resolved) -> ParallelConfig:
    """The one configuration the flags describe; dp defaults to the GPUs the others leave."""
    c, setup = {**(resolved.settings or {}), **resolved.config}, resolved.setup
    tp, pp, cp = c.get("tp", 1), c.get("pp", 1), c.get("cp", 1)
    n = setup.cluster.num_gpus
    dp = c.get("dp")
    if dp is None:
        if n % (tp * pp * cp):
            raise SpecError(f"--gpus {n} is not divisible by tp x pp x cp = {tp * pp * cp}; change the degrees")
        dp = n // (tp * pp * cp)
    config = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, zero=c.get("zero", ZeroStage.NONE),
                            sequence_parallel=bool(c.get("sequence_parallel", False)),
                            recompute=c.get("recompute", Recompute.NONE), micro_batch=resolved.micro_batch,
                            virtual_stages=c.get("virtual_stages", 1), ep=c.get("ep", 1),
                            offload=c.get("offload", Offload.NONE), **{name: c[name] for name in SETTINGS if name in c})
    compat.require(setup.model, setup.training, setup.cluster, config,
                   allow_cross_node_tp=resolved.search.allow_cross_node_tp)
    return config


def fixed_axes(resolved: Resolved) -> dict:
    """With --suggest, each configuration flag given fixes that axis of the search."""
    if "dp" in resolved.config:
        raise SpecError("--dp: with --suggest the data-parallel degree follows from the others; drop --dp")
    c = {**(resolved.settings or {}), **resolved.config}
    return {axis: c[axis] for axis in AXES + SETTINGS if axis in c}


@record(slots=True)
class ServingRequest:
    """What `fitplan infer` asks: the model, the GPUs, the instance's degrees and what is
    served; `assumed` names each default taken instead of a given value."""
    model: ModelSpec
    cluster: ClusterSpec
    tp: int
    pp: int
    options: InferOptions
    context: int
    assumed: tuple[str, ...]


def resolve_serving(request: Request) -> ServingRequest:
    """A serving request's specs: no training spec; tp defaults to the GPUs pp leaves."""
    spec = _spec_file(request)
    model, preset, hints = _model(request, spec)
    cluster, gpu_notes = _cluster(request, spec, preset)
    opts = options(InferOptions, request)
    config = {path[0]: v for path, v in given(request, "config").items()}
    assumed = list(model_assumptions(model, hints, serving=True)) + list(gpu_notes)
    pp = config.get("pp", 1)
    tp = config.get("tp")
    if tp is None:
        if cluster.num_gpus % pp:
            raise SpecError(f"--gpus {cluster.num_gpus} is not divisible by pp={pp}; tp is the GPUs pp leaves, so "
                            f"pick a pp that divides {cluster.num_gpus} or give --tp")
        tp = cluster.num_gpus // pp
        assumed.append(f"tp {tp}: the {cluster.num_gpus} GPUs {'' if pp == 1 else f'over pp {pp} '}in one "
                       f"tensor-parallel group (--tp sets it)")
    context = opts.context
    if context is None:
        context = model.max_seq_len
        assumed.append(f"context {context:,} tokens: the model's max_seq_len (--context sets it)")
    elif context > model.max_seq_len and model.position is not Position.LEARNED:
        assumed.append(f"context {context:,} tokens is past the model's max_seq_len {model.max_seq_len:,}: "
                       f"planned as given (rotary positions set no hard limit; the model must be trained for it)")
    return ServingRequest(model=model, cluster=cluster, tp=tp, pp=pp, options=opts, context=context,
                          assumed=tuple(assumed))
