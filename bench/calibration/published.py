"""The published calibration runs (bench/calibration/*.toml) as fitplan plans.

Each row of the sources in ../shared/CALIBRATION.md (transcribed as published in the TOML files beside
this one) becomes the `fitplan plan` flags that state it: the model preset, the GPU of its system, the
layout exactly as published, the framework and what its workload configuration sets. What the row and
its configuration leave open is assumed here, once per source, and said in the row's `assumed`. A row
fitplan cannot state stays in the set with the reason, and counts as a miss.

    rows()          every row: Mapped(id, source, group, flags or None, measured, assumed, why_not)
    runs()          the stated rows resolved as fitplan.calibrate.runs.Run, with their published step time
"""
import math
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = ("megatron_bridge.toml", "nemo.toml", "automodel.toml", "papers.toml")

# The systems' GPUs (CALIBRATION.md "What a system is")
SYSTEMS = {"DGX-H100": "h100-80gb", "DGX-B200": "b200", "DGX-GB200": "gb200", "DGX-GB300": "gb300",
           "DGX-B300": "b300", "DGX-A100 80GB (Selene)": "a100-80gb"}
NODE = {"gb200": 72, "gb300": 72}   # NVL72: one NVLink domain of 72 GPUs

# The models as the pages name them -> fitplan presets
MODELS = {
    "LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3.1-405b",
    "LLAMA3-8B": "llama3-8b", "LLAMA3-70B": "llama3-70b", "Llama3 70B": "llama3-70b",
    "Llama3 8B": "llama3-8b", "Llama3 70B 2-node": "llama3-70b",
    "LLAMA2-7B": "llama2-7b", "LLAMA2-13B": "llama2-13b", "LLAMA2-70B": "llama2-70b",
    "DeepSeekV3": "deepseek-v3", "DeepSeek V3 671B": "deepseek-v3", "Kimi K2": "kimi-k2",
    "GPT OSS 120B": "gpt-oss-120b", "GPT-OSS 120B": "gpt-oss-120b", "GPT-OSS 20B": "gpt-oss-20b",
    "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3 MoE 30B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b",
    "GPT3-5B": "nemo-gpt3-5b", "GPT3-20B": "nemo-gpt3-20b", "GPT3-175B": "gpt3-175b",
    "Nemotron-8B": "nemotron3-8b", "Nemotron-22B": "nemotron3-22b", "Nemotron-340B": "nemotron4-340b",
    "Qwen2.5 7B": "qwen2.5-7b", "Qwen2.5 32B": "qwen2.5-32b", "Qwen2.5 32B 2-node": "qwen2.5-32b",
    # hybrid Mamba models, their HF config.json shapes (fitplan.presets.models HYBRID_PRESETS)
    "Nemotron_3_Nano": "nemotron-3-nano-30b-a3b", "Nemotron V3 Nano 30B (26.02)": "nemotron-3-nano-30b-a3b",
    "Nemotron_3_5_Lightning": "nemotron-3.5-lightning-30b-a3b",
    "Nemotron_3_Super": "nemotron-3-super-120b-a12b", "Nemotron V3 Super 120B (26.02)": "nemotron-3-super-120b-a12b",
    "Nemotron_3_Ultra": "nemotron-3-ultra-550b-a55b", "Nemotron V3 Ultra 550B (26.04)": "nemotron-3-ultra-550b-a55b",
}
HYBRID = {name for name in MODELS.values() if name.startswith("nemotron-3")}


@dataclass(frozen=True)
class Mapped:
    id: str
    source: str                # the file's stem
    group: str                 # the model family, left out together in cross-validation
    flags: str | None          # the plan's flags; None: fitplan cannot state the row (why_not says why)
    measured: tuple            # ("step_s", s) or ("tflops_hw", X): the published figure
    assumed: tuple = ()        # what the row and its configuration leave open, and what is taken
    why_not: str = ""
    row: dict = field(default_factory=dict, repr=False)

    @property
    def stated(self) -> bool:
        return self.flags is not None


def load() -> list:
    out = []
    for name in FILES:
        path = HERE / name
        if path.exists():
            for row in tomllib.loads(path.read_text())["run"]:
                out.append((path.stem, row))
    return out


def _int(x, default=1):
    return default if x in (None, "n/a", "-", "") else int(x)


def _step_from_tokens(row) -> float:
    return row["gbs"] * row["seq_len"] / (row["tokens_per_s_per_gpu"] * row["gpus"])


def _precision(p: str, assumed: list) -> list:
    """A page's precision -> --precision and --compute-precision (recipes: fitplan presets list)."""
    p = p.split(" ")[0].upper()
    if p == "BF16":
        return ["--precision", "mixed-adam"]
    if p in ("FP8", "FP8-CS", "FP8-DS"):
        return ["--precision", "fp8", "--compute-precision", "fp8"]
    if p == "FP8-MX":
        return ["--precision", "fp8", "--compute-precision", "mxfp8"]
    if p == "NVFP4":
        return ["--precision", "fp8", "--compute-precision", "nvfp4"]
    raise ValueError(p)


def _layout(row, *, sp_with_tp=True) -> list:
    tp, pp, cp = _int(row.get("tp")), _int(row.get("pp")), _int(row.get("cp"))
    vp, ep = _int(row.get("vp")), _int(row.get("ep"))
    out = ["--gpus", row["gpus"], "--tp", tp, "--pp", pp, "--cp", cp, "--global-batch", row["gbs"],
           "--micro-batch", _int(row.get("mbs")), "--seq-len", row["seq_len"]]
    if vp > 1:
        out += ["--virtual-stages", vp]
    if ep > 1:
        out += ["--ep", ep]
    if tp > 1 and sp_with_tp:
        out += ["--sequence-parallel"]
    return out


def _config_recompute(cfg: dict) -> list:
    g = cfg.get("recompute_granularity")
    if g == "full":
        out = ["--recompute", "full"]
        method = cfg.get("recompute_method") or _other(cfg).get("recompute_method")   # a key, or in `other`
        if cfg.get("recompute_num_layers") and method == "block":
            out += ["--recompute-method", "block", "--recompute-num-layers", cfg["recompute_num_layers"]]
        return out
    if g == "selective":
        return ["--recompute", "selective"]
    return []


def _papers(row):
    """Narayanan et al. 2021 Table 1 and Korthikanti et al. 2022 Table 5: GPT models in Megatron-LM on Selene
    (A100 80GB, eight 200 Gb/s HDR NICs per node), fp16 mixed precision, eager attention with dropout."""
    assumed = []
    shape = ["--layers", row["num_layers"], "--hidden", row["hidden_size"], "--heads", row["num_heads"],
             "--vocab", row.get("vocab_size", 51200), "--mlp", "gelu", "--max-seq-len", row["seq_len"]]
    flags = shape + ["--gpu", "a100-80gb", "--framework", "megatron-lm", "--attention-kernel", "eager", "--dropout",
                     "--precision", "mixed-adam"]
    if row["id"].startswith("narayanan"):
        flags += _layout(dict(row, mbs=1), sp_with_tp=False) + ["--recompute", "full"]
        assumed.append("micro-batch 1, no interleaving: Table 1 gives neither")
        return flags, ("tflops_hw", row["model_tflops_per_gpu"]), assumed
    selective = "selective" in row["id"]
    flags += _layout(row, sp_with_tp=selective) + ["--recompute", "selective" if selective else "full"]
    return flags, ("step_s", row["step_time_s"]), assumed


def _nemo(row):
    """NeMo 24.07 on DGX-H100, FP8 (the page's only release): Megatron-Core with Transformer Engine, the
    distributed optimizer, sequence parallel with tp, NeMo 2's FP8 (delayed scaling, fp8 parameter gather)."""
    assumed = ["distributed optimizer (ZeRO-1) and sequence parallel with tp, NeMo's recipes; no recompute, "
               "tp overlap on with tp > 1 (the page publishes no workload configuration)"]
    flags = ["--preset", MODELS[row["model"]], "--gpu", SYSTEMS[row["system"]], "--framework", "nemo",
             "--zero", 1] + _precision(row["precision"], assumed) + _layout(row)
    if _int(row.get("tp")) > 1:
        flags += ["--tp-comm-overlap"]
    if row["task"] == "lora":
        flags += ["--finetune", "lora", "--lora-rank", 32]
        assumed.append("LoRA rank 32 on every linear layer (NeMo 2's default LoRA)")
    return flags, ("step_s", _step_from_tokens(row)), assumed


def _automodel(row):
    """NeMo AutoModel on DGX-H100, BF16: FSDP2 over every data-parallel rank (the FSDP column), TE linear and
    norm kernels, DeepEP for MoE, the attention kernel the row names, recompute as its configuration says."""
    cfg = row.get("config", {})
    assumed = []
    model = MODELS.get(row["model"])
    flags = ["--preset", model, "--gpu", "h100-80gb", "--framework", "fsdp", "--kernels", "fused", "--zero", 3,
             "--precision", "mixed-adam"]
    k = row.get("kernels", "")
    flags += ["--attention-kernel", "cudnn" if "attn te" in cfg.get("other", "") else "flash2"]
    ep = _int(row.get("ep"))
    if ep == 1 and "ep_size" in cfg.get("other", ""):
        ep = int(cfg["other"].split("ep_size ")[1].split(",")[0].split(";")[0])
        assumed.append(f"ep {ep}: the row prints '-', its configuration sets ep_size {ep}")
    lay = _layout(dict(row, ep=ep), sp_with_tp=cfg.get("sequence_parallel", False))
    flags += lay + _config_recompute(cfg)
    if row["task"] == "lora":
        flags += ["--finetune", "lora", "--lora-rank", 16]
    if "deepep" in (cfg.get("moe_token_dispatcher", "") + k.lower()):
        flags += ["--moe-dispatcher", "deepep"]
    if _is_moe(model):
        # AutoModel's own MoE layer runs the local experts as one grouped GEMM (GroupedExpertsDeepEP: grouped_gemm's
        # ops.gmm over tokens_per_expert, NVIDIA-NeMo/Automodel nemo_automodel/components/moe/layers.py@61480ccefb;
        # later versions also torch._grouped_mm), not Megatron-Core's TE GroupedLinear with a GEMM per expert
        flags += ["--expert-gemm", "grouped"]
    if model in HYBRID and MODELS_MTP.get(model):
        flags += ["--mtp-depth", 0]
        assumed.append("no multi-token-prediction module: AutoModel builds transformers' NemotronH, which leaves "
                       "the checkpoint's MTP layers out (_keys_to_ignore_on_load_unexpected mtp.*)")
    return flags, ("step_s", row.get("step_time_s") or _step_from_tokens(row)), assumed


# Megatron-Bridge's recompute modules -> fitplan's modes: the attention core is selective; norms, MLA's
# up-projections and the MoE activation are the cheap "norms" kind; an MLP or a whole MoE layer reruns most of
# a layer's GEMMs, nearest full
def _recompute_modules(cfg: dict, assumed: list, *, moe: bool = False) -> list:
    g, mods = cfg.get("recompute_granularity"), cfg.get("recompute_modules")
    if g == "full":
        return _config_recompute(cfg)
    if g != "selective":
        return []
    if mods is None:          # Megatron-Core's default list: ["core_attn"]
        return ["--recompute", "selective"]
    if moe and "mlp" in mods:
        # "mlp" reruns a dense layer's MLP only: TransformerLayer sets recompute_mlp when "mlp" is listed and the
        # layer is not an MoE layer (megatron/core/transformer/transformer_layer.py @d98e8a6); MoE layers need "moe"
        mods = [m for m in mods if m != "mlp"]
        assumed.append("recompute module mlp reruns only the first dense layers' MLPs (not the MoE layers': "
                       "Megatron-Core's transformer_layer.py); that rerun is not counted")
    if not mods:
        return []
    if "mlp" in mods:
        assumed.append(f"recompute modules {mods} planned as full recompute (the MLP's GEMMs rerun)")
        return ["--recompute", "full"]
    if "moe" in mods:
        assumed.append(f"recompute modules {mods} planned as selective (the MoE layer's rerun not counted)")
        return ["--recompute", "selective"]
    if "core_attn" in mods:
        return ["--recompute", "selective"]
    if not set(mods) <= {"mla_up_proj", "layernorm", "moe_act"}:
        raise ValueError(f"recompute modules {mods}")
    if set(mods) != {"mla_up_proj"} and set(mods) != {"layernorm", "mla_up_proj"}:
        assumed.append(f"recompute modules {mods} planned as norms recompute (cheap elementwise reruns)")
    return ["--recompute", "norms"]


def _other(cfg: dict) -> dict:
    """The workload configuration's `other` text as key -> value."""
    out = {}
    for part in cfg.get("other", "").split(";"):
        key, _, value = part.strip().partition("=")
        out[key.split("(")[0].strip()] = value.strip()
    return out


# Megatron-Bridge's mixed-precision presets that keep layers in bf16 by name (src/megatron/bridge/training/
# mixed_precision.py @51885cf1, v0.6.0): nemotron_3_super_bf16_with_nvfp4_mixed sets first_last_layers_bf16 and
# num_layers_at_end_in_bf16 = 14, the start left at MixedPrecisionConfig's 0. (bf16_with_fp8_current_scaling_mixed
# keeps one at each end, but the perf scripts turn that off: scripts/performance/utils/precision.py and
# perf_recipes/_common.py _perf_precision set first_last_layers_bf16 = False for fp8_cs.)
BRIDGE_BF16_LAYERS = {"nemotron_3_super_bf16_with_nvfp4_mixed": (0, 14)}


def _bf16_layers(other: dict) -> list:
    """--bf16-first-layers / --bf16-last-layers from the row's mixed-precision preset, or from the
    first_last_layers_bf16 and num_layers_at_*_in_bf16 values its configuration sets (`other`)."""
    first, last = BRIDGE_BF16_LAYERS.get(other.get("mixed_precision", "").removesuffix("()"), (0, 0))
    if other.get("first_last_layers_bf16") == "True":
        first = int(other.get("num_layers_at_start_in_bf16", first))
        last = int(other.get("num_layers_at_end_in_bf16", last))
    elif other.get("first_last_layers_bf16") == "False":
        first = last = 0
    return (["--bf16-first-layers", first] if first else []) + (["--bf16-last-layers", last] if last else [])


BRIDGE_PRECISION = {"BF16": "BF16", "FP8": "FP8-CS", "FP8-CS": "FP8-CS", "FP8-MX": "FP8-MX", "MXFP8": "FP8-MX",
                    "NVFP4": "NVFP4"}
BRIDGE_MODELS = {"DeepSeekV3 (w/o MTP)": ("deepseek-v3", ["--mtp-depth", 0]),
                 "DeepSeekV3 (w/ MTP)": ("deepseek-v3", []), "DeepSeekV3 (dropless)": ("deepseek-v3", []),
                 "DeepSeekV3 (tokendrop)": ("deepseek-v3", []), "Qwen3_30B_a3B (tokendrop)": ("qwen3-30b-a3b", []),
                 "Qwen3_235B_a22B (tokendrop)": ("qwen3-235b-a22b", []), "Kimi_K2": ("kimi-k2", [])}


def _bridge(row):
    """Megatron-Bridge's performance tables: Megatron-Core with Transformer Engine under its perf recipes, each
    row's workload configuration read at the release's tag (the row's config_source)."""
    cfg = row.get("config", {})
    other = _other(cfg)
    assumed = []
    model, extra = BRIDGE_MODELS.get(row["model"], (MODELS.get(row["model"]), []))
    if model is None:
        raise ValueError(f"model {row['model']} (no preset: {'a hybrid Mamba model, issue 29' if 'Nemotron' in row['model'] else 'its architecture is not modelled'})")
    flags = ["--preset", model, "--gpu", SYSTEMS[row["system"]], "--framework", "nemo"] + extra
    fsdp = cfg.get("use_megatron_fsdp") or _int(row.get("fsdp"), 0) > 0
    flags += ["--zero", 3 if fsdp else 1]
    flags += _precision(BRIDGE_PRECISION[row["precision"].split(" ")[0]], assumed)
    flags += _bf16_layers(other)
    flags += _layout(row, sp_with_tp=bool(cfg.get("sequence_parallel", _int(row.get("tp")) > 1)))
    flags += _recompute_modules(cfg, assumed, moe=_is_moe(model))
    for name, flag in (("overlap_grad_reduce", "overlap-grad-reduce"), ("overlap_param_gather", "overlap-param-gather")):
        if name in cfg:
            flags += [f"--{flag}" if cfg[name] else f"--no-{flag}"]
    if cfg.get("tp_comm_overlap") and _int(row.get("tp")) > 1 and cfg.get("sequence_parallel"):
        flags += ["--tp-comm-overlap"]
    graphs, scope = str(cfg.get("cuda_graph")), cfg.get("cuda_graph_scope") or []
    if graphs == "full_iteration" or (graphs in ("local", "transformer_engine") and "full_iteration" in scope) \
            or graphs == "enable_cuda_graph=True":
        flags += ["--cuda-graphs"]
    elif graphs == "transformer_engine" and scope:
        assumed.append(f"CUDA graphs of {', '.join(scope)} only: the layers' host overhead counted whole")
    if cfg.get("moe_token_dispatcher") == "flex":
        flags += ["--moe-dispatcher", "deepep"]
    elif cfg.get("moe_token_dispatcher") == "alltoall":
        flags += ["--moe-dispatcher", "alltoall"]
    if other.get("moe_a2a_overlap") == "True":
        flags += ["--overlap-moe-expert-parallel-comm"]
    if "mtp_num_layers" in other and model == "deepseek-v3" and "--mtp-depth" not in extra:
        # the row's own "w/o MTP" wins over the configuration read at the tag (its FLOPs per token are the
        # model's without MTP: the FLOP convention in megatron_bridge.toml)
        flags += ["--mtp-depth", other["mtp_num_layers"]]
    if model in HYBRID:
        _hybrid_bridge(model, flags, other, assumed)
    if "moe_expert_capacity_factor" in other:
        flags += ["--capacity-factor", other["moe_expert_capacity_factor"]]
    if "num_distributed_optimizer_instances" in other:
        dp = row["gpus"] // (_int(row.get("tp")) * _int(row.get("pp")) * _int(row.get("cp")))
        flags += ["--shard-degree", dp * _int(row.get("cp")) // int(other["num_distributed_optimizer_instances"])]
    if row["task"] == "lora":
        flags += ["--finetune", "lora", "--lora-rank", 16, "--lora-targets", "qkv"]
    elif row["task"] == "sft":
        flags += ["--finetune", "full"]
    if cfg.get("cpu_offloading"):
        assumed.append("activation offloading of some layers (cpu_offloading_num_layers) not modelled")
    if "pipeline_model_parallel_layout" in other:
        pins = _layout_pins(other["pipeline_model_parallel_layout"], _int(row.get("pp")), _int(row.get("vp")))
        if pins is None:
            assumed.append("the configuration's pipeline layout planned as an even split")
        else:
            flags += ["--first-stage-layers", pins[0], "--last-stage-layers", pins[1]]
    if other.get("fp8_dot_product_attention") == "True":
        flags += ["--attention-precision", "fp8"]
    return flags, ("step_s", _step_from_tokens(row)), assumed


def _layout_chunks(text: str) -> list:
    """Megatron-Core's pipeline_model_parallel_layout (megatron/core/transformer/pipeline_parallel_layer_layout.py
    PipelineParallelLayerLayout.from_str): "Et*4|(t*4|)*14tmL" (E embedding, t a decoder layer, m an MTP layer, L the
    loss; x*n and (...)*n repeat; | ends a virtual chunk), or the list of lists the recipes pass. Decoder layers
    per model chunk, chunk 0 first."""
    if text.startswith("["):
        return [chunk.count("'decoder'") for chunk in re.findall(r"\[([^\[\]]*)\]", text)]
    text = text.replace(",", "").replace(" ", "")
    while "(" in text:
        text = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"([A-Za-z])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    return [chunk.count("t") for chunk in text.split("|")]


def _layout_pins(text: str, pp: int, vp: int):
    """A layout's decoder layers on the first and the last pipeline stage (each the sum of its chunks i + k*pp),
    when the layout has the pp*vp chunks the row runs and its middle stages hold what fitplan's pinned split gives
    them (fitplan.counts.stages.stage_layers: the rest spread evenly, extras on the later stages); else None."""
    from fitplan.counts import stages as ST
    chunks = _layout_chunks(text)
    if pp < 2 or len(chunks) != pp * max(vp, 1):
        return None
    stages = [sum(chunks[i::pp]) for i in range(pp)]
    L = sum(stages)
    if any(ST.stage_layers.fn(L=L, p=pp, v=max(vp, 1), i=i, first=stages[0], last=stages[-1]) != n
           for i, n in enumerate(stages)):
        return None
    return stages[0], stages[-1]


def _is_moe(model) -> bool:
    from fitplan.presets import MODELS as PRESETS
    return model in PRESETS and PRESETS[model].model.moe is not None


def _mtp_depths() -> dict:
    from fitplan.presets import MODELS as PRESETS
    return {name: PRESETS[name].model.mtp_depth for name in HYBRID}


MODELS_MTP = _mtp_depths()


def _hybrid_bridge(model: str, flags: list, other: dict, assumed: list) -> None:
    """Megatron-Bridge's Nemotron 3 recipes (src/megatron/bridge/perf_recipes/nemotronh/): the multi-token-
    prediction module runs mtp_num_layers depths with one set of weights (mtp_use_repeated_layer = True);
    selective recompute of the norms and the MoE activation has no hybrid form in fitplan."""
    depths = int(other.get("mtp_num_layers", 0))
    if MODELS_MTP[model] and depths:
        flags += ["--mtp-depth", depths]
        if depths > 1:
            assumed.append(f"the MTP module runs {depths} depths on one set of weights (mtp_use_repeated_layer): "
                           f"fitplan plans {depths} modules, their weights and optimizer state {depths} times")
    elif MODELS_MTP[model]:
        flags += ["--mtp-depth", 0]
        assumed.append("no multi-token-prediction module: the configuration sets no mtp_num_layers")
    if "norms" in flags:
        i = flags.index("norms")
        del flags[i - 1:i + 1]
        assumed[:] = [a for a in assumed if "planned as norms recompute" not in a]
        assumed.append("recompute of the norms and the MoE activation only (layernorm, moe_act) planned as no "
                       "recompute: fitplan's norms recompute has no hybrid form (their stored bytes are counted)")
    if other.get("fine_grained_activation_offloading", "").startswith("True"):
        assumed.append("fine-grained activation offloading of the experts' MLP (offload_modules) not modelled")


MAPPERS = {"papers": _papers, "nemo": _nemo, "automodel": _automodel, "megatron_bridge": _bridge}


def rows() -> list[Mapped]:
    out = []
    for source, row in load():
        gpu = SYSTEMS.get(row["system"])
        group = row.get("family", "")
        try:
            flags, measured, assumed = MAPPERS[source](row)
        except (KeyError, ValueError) as error:
            out.append(Mapped(row["id"], source, group, None, (), (), f"not mapped: {error}", row))
            continue
        if gpu in NODE:
            flags += ["--gpus-per-node", NODE[gpu]]
        out.append(Mapped(row["id"], source, group, shlex.join(str(x) for x in flags), measured, tuple(assumed),
                          "", row))
    return out


def resolve(flags: str):
    """(setup, config) the flags state, or a SpecError."""
    from fitplan.cli import build_parser, request_from_args
    from fitplan.resolve import config_of, resolve as resolve_request
    args = build_parser("plan").parse_args(["plan"] + shlex.split(flags))
    r = resolve_request(request_from_args(args))
    return r.setup, config_of(r)


def runs(mapped=None):
    """The stated rows as calibrate.runs.Run (published step time), and the rest with why fitplan cannot state them."""
    from fitplan.calibrate.runs import Run
    from fitplan.errors import SpecError
    from fitplan.explain import RAW
    from fitplan.timing.step import step_time
    good, missed = [], []
    for m in rows() if mapped is None else mapped:
        if not m.stated:
            missed.append((m, m.why_not))
            continue
        try:
            setup, config = resolve(m.flags)
        except (SpecError, SystemExit) as error:
            missed.append((m, f"fitplan cannot state it: {error}"))
            continue
        kind, value = m.measured
        if kind == "step_s":
            measured = value
        else:   # published hardware TFLOP/s per GPU: the step the same FLOPs take at that rate
            flops = step_time(RAW, setup, config)["flops/hardware_step"]
            measured = flops / (value * 1e12 * config.world_size)
        tags = {"architecture": setup.cluster.gpu.architecture, "precision": setup.training.recipe.compute,
                "framework": setup.training.framework or "none"}
        good.append(Run(name=m.id, flags=m.flags, setup=setup, config=config, measured_step_s=float(measured),
                        group=m.group, tags=tags))
    return good, missed


if __name__ == "__main__":
    good, missed = runs()
    print(f"{len(good)} stated, {len(missed)} not")
    for m, why in missed:
        print(" ", m.id, why[:150])
    import math as _m
    from fitplan.calibrate.runs import predict
    from fitplan.timing import calibration as CAL
    pred = predict(good, CAL.SHIPPED)[:, 0]
    for r, p in zip(good, pred):
        print(f"{r.name:55s} {r.measured_step_s:9.3f} {p:9.3f} {_m.log(p / r.measured_step_s):+.3f}")
