"""A ModelSpec from a Hugging Face config.json, without transformers.

Families (model_type) and the fields read, as transformers writes them
(docs/engines.md#hugging-face-configjson-fields); each family's weights are those its
transformers module (models/<family>/modeling_<family>.py) builds:

  gpt2      n_layer, n_embd, n_head, n_positions (older files: n_ctx), vocab_size,
            n_inner (null: 4*n_embd), activation_function (a GeLU), tie_word_embeddings
            (default true). Every linear has a bias, LayerNorm, learned positions.
  llama,    hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads
  mistral,  (missing or null: = heads), intermediate_size, vocab_size,
  qwen2,    max_position_embeddings, tie_word_embeddings (default false), head_dim (missing
  qwen3,    or null: hidden/heads), hidden_act (silu: SwiGLU, 3 matrices). RMSNorm, RoPE.
  phi3,     Llama/Mistral/Qwen3/OLMo 2: biases from attention_bias / mlp_bias (default none).
  olmo2     Qwen2: q/k/v projections have biases, o_proj and the MLP do not.
            Qwen3: q_norm/k_norm, an RMSNorm of head_dim each. OLMo 2: q_norm/k_norm over the
            whole q (a*d) and k (g*d) projections; its two norms come after attention and
            the MLP, the same count. Phi-3: fused qkv_proj and gate_up_proj, the same weights
            as separate ones, no biases. Mistral and Phi-3 attend within sliding_window.
  gemma,    the Llama fields; head_dim (default 256); hidden_activation or hidden_act (a GeLU:
  gemma2,   GeGLU, 3 matrices); tie_word_embeddings (default true). Gemma 2 and 3 add
  gemma3    post-attention and post-feedforward norms (4 per layer) and alternate sliding_window
            layers with full ones: Gemma 2 every second layer full, Gemma 3 every
            sliding_window_pattern-th (default 6); Gemma 3 adds per-head q/k norms. A gemma3
            file (image and text) is read from its text_config (model_type gemma3_text, with
            Gemma3TextConfig's defaults: vocab_size 262208, max_position_embeddings 131072,
            sliding_window 4096): the vision tower is not planned.
  gpt_neox  the Llama names; hidden_act (a GeLU, 2 matrices), LayerNorm, biases on every
            linear (attention_bias, default true), rotary_pct of each head rotated (no
            weights), use_parallel_residual (no weights), untied embed_out (default).
  falcon    hidden_size, num_hidden_layers (n_layer), num_attention_heads (n_head),
            new_decoder_architecture (num_kv_heads), else multi_query (1 kv head) or
            multi-head; bias; ffn_hidden_size (default 4h); activation (a GeLU); LayerNorm;
            parallel_attn: one shared input norm, or ln_attn and ln_mlp
            (num_ln_in_parallel_attn, 2 for the new architecture); tie_word_embeddings
            (default true); max_position_embeddings (default 2048); alibi is refused.
  mixtral   the Llama fields + num_local_experts, num_experts_per_tok (experts of intermediate_size).
  qwen2_moe, the Qwen2 / Qwen3 fields + num_experts (transformers 5: num_local_experts),
  qwen3_moe num_experts_per_tok, moe_intermediate_size; decoder_sparse_step and
            mlp_only_layers pick the MoE layers (the others: a dense MLP of intermediate_size).
            Qwen2-MoE adds a shared expert of shared_expert_intermediate_size (counted as that
            width over moe_intermediate_size shared experts: the same weights) behind a sigmoid
            gate h -> 1.
  deepseek_v2, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size (the
  deepseek_v3 first_k_dense_replace dense layers), vocab_size, max_position_embeddings; MLA:
            q_lora_rank (null: queries not compressed, DeepSeek-V2-Lite), kv_lora_rank,
            qk_nope_head_dim, qk_rope_head_dim, v_head_dim; MoE: n_routed_experts,
            num_experts_per_tok, moe_intermediate_size, n_shared_experts, moe_layer_freq (1).
            DeepSeek-V3 (and topk_method noaux_tc) adds e_score_correction_bias, one number
            per routed expert. The multi-token-prediction modules (num_nextn_predict_layers)
            become mtp_depth: planned for training on the last stage, outside the main count
            (transformers does not build them); n_group > 1 with topk_group is node-limited routing.
  kimi_k2   Moonshot's Kimi K2: architectures DeepseekV3ForCausalLM, its auto_map's config a
            DeepseekV3Config under model_type kimi_k2; read as deepseek_v3.
  gpt_oss   hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
            vocab_size, max_position_embeddings, tie_word_embeddings (default false);
            num_local_experts (alias num_experts), num_experts_per_tok (older files:
            experts_per_token) experts of intermediate_size in every layer, each with biases on
            its gate/up and down projections, behind a router with a bias (E numbers);
            attention_bias (default true) on q, k, v and o; a learned sink per head (sinks);
            sliding_window (default 128) on the layers layer_types names (default: every
            other layer from the first). The experts' clamped SwiGLU has SwiGLU's weights.

  nemotron_h, hybrid Mamba models: fitplan.files.hf_hybrid.
  granitemoehybrid,
  jamba

The importer rule (docs/engines.md#hugging-face-configjson-fields): the canonical name
first, then the family alias (GPT-2's attribute_map: hidden_size -> n_embd, ...); defaults
only where transformers has a documented one (kv heads, head_dim, GPT-2's ffn, tying,
biases, Falcon's and Gemma 3's documented defaults). Every other field is required, so a
truncated file is an error that names the field, not a silent default.
Fields that do not change memory (rope_theta, eps, dropout rates, dtype, soft-capping,
query_pre_attn_scalar, rotary_pct) are ignored. A sliding window is recorded on the model;
the plan's activations and KV caches assume full attention and say so.
"""
import difflib
import json
from pathlib import Path

from fitplan.errors import SpecError
from fitplan.files import parse_json, read_small_text
from fitplan.specs.model import MlaSpec, MoeSpec, Mlp, ModelSpec, Norm, Position, QkNorm

DENSE_FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "qwen3", "phi3", "olmo2", "gemma", "gemma2", "gemma3",
                  "gemma3_text", "gpt_neox", "falcon")
MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss")
HYBRID_FAMILIES = ("nemotron_h", "granitemoehybrid", "jamba")   # fitplan.files.hf_hybrid
FAMILIES = DENSE_FAMILIES + MOE_FAMILIES + HYBRID_FAMILIES
GEMMAS = ("gemma", "gemma2", "gemma3", "gemma3_text")
QWEN_MOES = ("qwen2_moe", "qwen3_moe")
DEEPSEEKS = ("deepseek_v2", "deepseek_v3", "kimi_k2")
GELUS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate")
SILUS = ("silu", "swish")
_MISSING = object()
# Gemma3TextConfig's defaults, which the text_config of the published gemma3 (image and text)
# files relies on (google/gemma-3-4b-pt writes neither vocab_size nor max_position_embeddings).
GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262_208, "max_position_embeddings": 131_072, "sliding_window": 4096,
                        "sliding_window_pattern": 6, "head_dim": 256}


def model_from_hf_config(path, *, name: str | None = None) -> ModelSpec:
    """A config.json file, or a folder holding one. The name defaults to the folder's name
    (examples/hf/llama-3.1-8b/config.json -> 'llama-3.1-8b')."""
    return load_hf_config(path, name=name)[0]


def load_hf_config(path, *, name: str | None = None) -> tuple[ModelSpec, dict]:
    """The model and its training hints (training_hints) from a config.json or its folder."""
    file = _config_file(Path(path))
    where = str(file)
    text = read_small_text(file, where, "a Hugging Face config.json")
    default_name = file.parent.name if file.name == "config.json" and file.parent.name else file.stem
    return model_from_hf_text(text, where=where, name=name or default_name), training_hints(text)


def model_from_hf_text(text: str, *, where: str = "config.json", name: str = "hf-model") -> ModelSpec:
    """The same, from the text of a config.json (the web page's pasted config); `where`
    names it in errors."""
    config = parse_json(text, where)
    return model_from_hf_dict(config, where=where, name=name, source=f"Hugging Face config.json: {where}")


DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop", "dropout",
                "hidden_dropout_prob", "attention_probs_dropout_prob")


def training_hints(text: str) -> dict:
    """How the config says the model trained, for the defaults of its training: dropout on when
    any dropout probability in it is positive (GPT-2's 0.1; Llama's attention_dropout 0.0 is
    off); and `notes`, what the model read from it leaves out, for the plan's assumptions.
    The text has already been read as a model, so it parses."""
    config = json.loads(text)
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    rates = [c.get(k) for c in (config, text_config) for k in DROPOUT_KEYS]
    return {"dropout": any(isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0 for r in rates),
            "notes": model_notes(config)}


def model_notes(config: dict) -> tuple[str, ...]:
    """Lines for the plan's assumptions: the parts of the checkpoint the model read leaves out."""
    family, notes = config.get("model_type"), []
    if family == "gemma3" and isinstance(config.get("text_config"), dict):
        notes.append("gemma3: the language model (text_config) only; the vision tower (vision_config) and the "
                     "multi-modal projector are not planned")
    mtp = config.get("num_nextn_predict_layers")
    if family in DEEPSEEKS + ("nemotron_h",) and isinstance(mtp, int) and not isinstance(mtp, bool) and mtp > 0:
        notes.append(f"{family}: the {mtp} multi-token-prediction module{'s' if mtp > 1 else ''} "
                     f"(num_nextn_predict_layers) planned on the last pipeline stage (memory and time), outside "
                     f"the parameter count, as the model card counts the main model")
    return tuple(notes)


def model_from_hf_dict(config, *, where: str = "config.json", name: str = "hf-model",
                       source: str = "") -> ModelSpec:
    """The same, from an already parsed config.json object."""
    if not isinstance(config, dict):
        raise SpecError(f"{where}: expected a JSON object {{...}} at the top level, got "
                        f"{type(config).__name__}; is this a Hugging Face config.json?")
    family = config.get("model_type")
    if family is None:
        raise SpecError(f"{where}: no 'model_type'; add it (one of {', '.join(FAMILIES)})")
    if not isinstance(family, str):
        raise SpecError(f"{where}: 'model_type' must be a string, got {family!r}")
    if family not in FAMILIES:
        close = difflib.get_close_matches(family, FAMILIES, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SpecError(f"{where}: unknown model_type {family!r}; {hint}fitplan reads "
                        f"{', '.join(FAMILIES)}; describe other models in a model spec file")
    if family == "gemma3":   # image and text: the language model is the text_config
        text_config = config.get("text_config")
        if not isinstance(text_config, dict):
            raise SpecError(f"{where}: a gemma3 config has its language model in 'text_config', an object; "
                            f"none here (a text-only file says model_type \"gemma3_text\")")
        config = text_config
        where = f"{where} text_config"
    cfg = _Config(config, where, family)
    _refuse_experts(cfg)
    try:
        kwargs = _shape(cfg)
        return ModelSpec(name=name, source=source, **kwargs)
    except SpecError as err:
        raise _named(where, err) from None


def _shape(cfg: "_Config") -> dict:
    family = cfg.family
    if family in HYBRID_FAMILIES:
        from fitplan.files.hf_hybrid import hybrid_shape
        return hybrid_shape(cfg)
    if family == "gpt2":
        return _gpt2(cfg)
    if family == "gpt_neox":
        return _gpt_neox(cfg)
    if family == "falcon":
        return _falcon(cfg)
    if family in DEEPSEEKS:
        return _deepseek(cfg)
    if family == "gpt_oss":
        return _gpt_oss(cfg)
    if family in GEMMAS:
        return _gemma(cfg)
    kwargs = _llama_like(cfg)
    if family == "mixtral":
        kwargs.update(_mixtral_experts(cfg))
    elif family in QWEN_MOES:
        kwargs.update(_qwen_experts(cfg, kwargs["num_layers"]))
    return kwargs


def _named(where: str, err: SpecError) -> SpecError:
    """The file's name in front of a spec's own message, once (the config reader's already has it)."""
    text = str(err)
    return SpecError(text if text.startswith(f"{where}: ") else f"{where}: {text}")


def _config_file(path: Path) -> Path:
    try:
        return _find_config(path)
    except OSError as err:   # e.g. a name longer than the file system allows
        raise SpecError(f"{path}: cannot read it ({err.strerror or type(err).__name__}); check the path") from None


def _find_config(path: Path) -> Path:
    if path.is_dir():
        file = path / "config.json"
        if not file.is_file():
            raise SpecError(f"{path}: no config.json in this folder; pass the file itself or the folder "
                            f"that holds it")
        return file
    if not path.exists():
        raise SpecError(f"{path}: no such file or folder; pass a Hugging Face config.json or its folder")
    return path


class _Config:
    """Typed reads from one config.json, each error naming the file and the field."""

    def __init__(self, data: dict, where: str, family: str):
        self.data, self.where, self.family = data, where, family

    def _find(self, names):
        for name in names:
            if self.data.get(name) is not None:
                return name, self.data[name]
        return names[0], _MISSING

    def int(self, *names: str, default=_MISSING):
        name, value = self._find(names)
        if value is _MISSING:
            if default is not _MISSING:
                return default
            aliases = f" (nor {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""
            raise SpecError(f"{self.where}: {self.family} config has no {name!r}{aliases}; add it as a whole "
                            f"number or describe the model in a model spec file")
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{self.where}: {name!r} must be a whole number, got {value!r}; write it as a "
                            f"JSON integer (no quotes, no decimals)")
        return value

    def bool(self, name: str, default: bool) -> bool:
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(f"{self.where}: {name!r} must be true or false, got {value!r}")
        return value

    def str(self, *names: str, default: str) -> str:
        name, value = self._find(names)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise SpecError(f"{self.where}: {name!r} must be a string, got {value!r}")
        return value

    def ints(self, name: str) -> list:
        """A list of whole numbers; missing or null: empty."""
        value = self.data.get(name)
        if value is None:
            return []
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise SpecError(f"{self.where}: {name!r} must be a list of whole numbers, got {value!r}")
        return value

    def strs(self, name: str) -> list | None:
        """A list of strings; missing or null: None."""
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or any(not isinstance(v, str) for v in value):
            raise SpecError(f"{self.where}: {name!r} must be a list of strings, got {value!r}")
        return value

    def activation(self, *names: str, default: str, allowed: tuple, what: str) -> str:
        value = self.str(*names, default=default)
        if value not in allowed:
            name = next((n for n in names if self.data.get(n) is not None), names[0])
            raise SpecError(f"{self.where}: {name} {value!r} is not {what}; fitplan's {self.family} MLP needs "
                            f"one of {', '.join(allowed)}; use a model spec file for another MLP")
        return value


def _refuse_experts(cfg: _Config) -> None:
    """Experts in a dense family (e.g. a Qwen2-MoE config labelled qwen2) would be counted
    wrongly: refuse, naming the field."""
    counts = [f for f in ("num_local_experts", "num_experts", "n_routed_experts")
              if isinstance(cfg.data.get(f), int) and not isinstance(cfg.data[f], bool) and cfg.data[f] > 1]
    if cfg.family in MOE_FAMILIES + HYBRID_FAMILIES or not counts:
        return
    raise SpecError(f"{cfg.where}: {counts[0]} = {cfg.data[counts[0]]} in a {cfg.family} config; fitplan reads "
                    f"experts from {', '.join(MOE_FAMILIES)} configs only; use a model spec file with a "
                    f"[model.moe] table")


def _mixtral_experts(cfg: _Config) -> dict:
    """Mixtral: every layer routes to num_experts_per_tok of num_local_experts SwiGLU experts
    of intermediate_size (dropless, Jiang et al. 2024)."""
    return dict(moe=MoeSpec(num_experts=cfg.int("num_local_experts"), experts_per_token=cfg.int("num_experts_per_tok"),
                            expert_ffn_size=cfg.int("intermediate_size")))


def _qwen_experts(cfg: _Config, layers: int) -> dict:
    """Qwen2-MoE and Qwen3-MoE (transformers Qwen2MoeDecoderLayer): layer i is an MoE layer
    when it is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0, else a dense
    MLP of intermediate_size. fitplan's MoE layers are all but the first few, so the MoE
    layers must be the last ones. Qwen2-MoE's shared expert, one SwiGLU MLP of
    shared_expert_intermediate_size, is shared_expert_intermediate_size / moe_intermediate_size
    shared experts of the routed width (the same weights, as DeepSeek's n_shared_experts
    are one MLP of n_shared_experts * moe_intermediate_size), gated by sigmoid(h -> 1)."""
    experts = cfg.int("num_experts", "num_local_experts")
    step = cfg.int("decoder_sparse_step", default=1)
    if step < 1:
        raise SpecError(f"{cfg.where}: 'decoder_sparse_step' must be >= 1, got {step}")
    dense_only = set(cfg.ints("mlp_only_layers"))
    sparse = [i for i in range(layers) if i not in dense_only and (i + 1) % step == 0]
    first_dense = layers - len(sparse)
    if not sparse or sparse != list(range(first_dense, layers)):
        raise SpecError(f"{cfg.where}: decoder_sparse_step {step} and mlp_only_layers {sorted(dense_only)} make "
                        f"layers {sparse[:8]}{'...' if len(sparse) > 8 else ''} MoE layers; fitplan's MoE "
                        f"layers are the last ones after first_dense_layers dense ones; describe the model in a "
                        f"model spec file")
    ffn = cfg.int("moe_intermediate_size")
    shared, gate = 0, False
    if cfg.family == "qwen2_moe":
        width = cfg.int("shared_expert_intermediate_size")
        if width % ffn:
            raise SpecError(f"{cfg.where}: shared_expert_intermediate_size {width} is not a whole number of "
                            f"moe_intermediate_size {ffn} experts; fitplan counts the shared expert in routed "
                            f"experts' widths; describe the model in a model spec file")
        shared, gate = width // ffn, width > 0
    return dict(moe=MoeSpec(num_experts=experts, experts_per_token=cfg.int("num_experts_per_tok"),
                            expert_ffn_size=ffn, num_shared_experts=shared, first_dense_layers=first_dense,
                            shared_expert_gate=gate))


def _gpt2(cfg: _Config) -> dict:
    hidden = cfg.int("n_embd", "hidden_size")
    heads = cfg.int("n_head", "num_attention_heads")
    cfg.activation("activation_function", default="gelu_new", allowed=GELUS, what="a GeLU")
    if cfg.bool("add_cross_attention", False):
        raise SpecError(f"{cfg.where}: add_cross_attention is true; fitplan models decoder-only GPT-2 "
                        f"without cross-attention; set it to false")
    return dict(num_layers=cfg.int("n_layer", "num_hidden_layers"), hidden_size=hidden, num_heads=heads,
                num_kv_heads=heads, ffn_hidden_size=cfg.int("n_inner", default=4 * hidden),
                vocab_size=cfg.int("vocab_size"),
                max_seq_len=cfg.int("n_positions", "n_ctx", "max_position_embeddings"),
                mlp=Mlp.GELU, norm=Norm.LAYERNORM, position=Position.LEARNED,
                tied_embeddings=cfg.bool("tie_word_embeddings", True), linear_bias=True)


def _head_dim(head_dim, hidden: int, heads: int):
    """head_dim = hidden/heads is the default and is stored as None, like the presets."""
    return None if head_dim is None or head_dim * heads == hidden else head_dim


def _llama_like(cfg: _Config) -> dict:
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    cfg.activation("hidden_act", default="silu", allowed=SILUS, what="SiLU")
    layers = cfg.int("num_hidden_layers")
    out = dict(num_layers=layers, hidden_size=hidden, num_heads=heads,
               num_kv_heads=cfg.int("num_key_value_heads", default=heads),
               ffn_hidden_size=cfg.int("intermediate_size"), vocab_size=cfg.int("vocab_size"),
               max_seq_len=cfg.int("max_position_embeddings"), mlp=Mlp.SWIGLU, norm=Norm.RMSNORM,
               position=Position.ROPE, tied_embeddings=cfg.bool("tie_word_embeddings", False),
               head_dim=_head_dim(cfg.int("head_dim", default=None), hidden, heads))
    family = cfg.family
    if family in ("qwen2", "qwen2_moe"):
        out.update(_qwen2_biases(cfg))
    elif family == "phi3":
        out.update(linear_bias=False)   # Phi3Attention and Phi3MLP: bias=False throughout
    else:
        out.update(_llama_biases(cfg))
    if family in ("qwen3", "qwen3_moe"):
        out.update(qk_norm=QkNorm.HEAD)         # Qwen3Attention: q_norm, k_norm = RMSNorm(head_dim)
    elif family == "olmo2":
        out.update(qk_norm=QkNorm.PROJECTION)   # Olmo2Attention: RMSNorm(a*d), RMSNorm(g*d)
    if family in ("mistral", "mixtral", "phi3"):
        out.update(_window(cfg, layers, every=None))
    elif family.startswith("qwen"):
        out.update(_qwen_window(cfg, layers))
    return out


def _llama_biases(cfg: _Config) -> dict:
    attention, mlp = cfg.bool("attention_bias", False), cfg.bool("mlp_bias", False)
    if attention != mlp:
        raise SpecError(f"{cfg.where}: attention_bias = {str(attention).lower()} but mlp_bias = "
                        f"{str(mlp).lower()}; fitplan's linear_bias covers every linear layer, so it "
                        f"needs both true or both false")
    return dict(linear_bias=attention)


def _qwen2_biases(cfg: _Config) -> dict:
    """Qwen2 hard-codes bias=True on q_proj, k_proj and v_proj only (transformers
    Qwen2Attention): L*(q + 2kv) parameters, 27,648 for Qwen2-0.5B."""
    return dict(linear_bias=False, qkv_bias=True)


def _window(cfg: _Config, layers: int, *, every, default=None) -> dict:
    """sliding_window tokens on every layer (every None) or on all but every `every`-th layer
    ((i + 1) % every == 0 attends fully: Gemma 2's is_sliding = not layer_idx % 2, Gemma 3's
    sliding_window_pattern). A layer_types list (newer files) decides when present."""
    window = cfg.int("sliding_window", default=default)
    types = cfg.strs("layer_types")
    if types is not None:
        if len(types) != layers:
            raise SpecError(f"{cfg.where}: layer_types lists {len(types)} layers, num_hidden_layers is {layers}")
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
        if len(full) + len(sliding) != layers:
            other = next(t for t in types if t not in ("full_attention", "sliding_attention"))
            raise SpecError(f"{cfg.where}: layer_types has {other!r}; fitplan reads full_attention and "
                            f"sliding_attention")
        if not sliding:
            return {}
        every = None if not full else full[0] + 1
        if every is not None and (every < 2 or full != [i for i in range(layers) if (i + 1) % every == 0]):
            raise SpecError(f"{cfg.where}: layer_types attend fully at layers {full[:8]}; fitplan records a "
                            f"sliding window on every layer or on all but every N-th; describe the model in a "
                            f"model spec file")
        if window is None:
            raise SpecError(f"{cfg.where}: layer_types has sliding_attention layers but no 'sliding_window'")
    if window is None:
        return {}
    return dict(sliding_window=window, full_attention_every=every)


def _qwen_window(cfg: _Config, layers: int) -> dict:
    """Qwen2/Qwen3 files carry a sliding_window that is used only with use_sliding_window
    (false in the published files); then the first max_window_layers layers attend fully,
    which fitplan's every-N-th pattern cannot state."""
    if not cfg.bool("use_sliding_window", False):
        return {}
    if cfg.int("max_window_layers", default=layers) >= layers:
        return {}
    raise SpecError(f"{cfg.where}: use_sliding_window is true with max_window_layers "
                    f"{cfg.int('max_window_layers')} < {layers} layers; fitplan records a sliding window on every "
                    f"layer or on all but every N-th, not on the last layers only; describe the model in a model "
                    f"spec file")


def _gemma(cfg: _Config) -> dict:
    """Gemma (transformers GemmaDecoderLayer): the Llama layout with a GeGLU MLP, tied
    embeddings and head_dim 256 by default; its RMSNorm scales by (1 + w), still h weights.
    Gemma 2 (Gemma2DecoderLayer) and Gemma 3 (Gemma3DecoderLayer) add post_attention and
    post_feedforward norms (4 per layer) and sliding-window layers; Gemma 3 adds q_norm and
    k_norm of head_dim (Gemma3Attention)."""
    family = cfg.family
    defaults = GEMMA3_TEXT_DEFAULTS if family == "gemma3" else {}
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    layers = cfg.int("num_hidden_layers")
    cfg.activation("hidden_activation", "hidden_act", default="gelu_pytorch_tanh", allowed=GELUS, what="a GeLU")
    attention_bias = cfg.bool("attention_bias", False)
    if attention_bias:
        raise SpecError(f"{cfg.where}: attention_bias is true; a Gemma MLP has no biases, and fitplan's "
                        f"linear_bias covers every linear layer; describe the model in a model spec file")
    out = dict(num_layers=layers, hidden_size=hidden, num_heads=heads,
               num_kv_heads=cfg.int("num_key_value_heads", default=heads),
               ffn_hidden_size=cfg.int("intermediate_size"),
               vocab_size=cfg.int("vocab_size", default=defaults.get("vocab_size", _MISSING)),
               max_seq_len=cfg.int("max_position_embeddings",
                                   default=defaults.get("max_position_embeddings", _MISSING)),
               mlp=Mlp.GEGLU, norm=Norm.RMSNORM, position=Position.ROPE, linear_bias=False,
               tied_embeddings=cfg.bool("tie_word_embeddings", True),
               head_dim=_head_dim(cfg.int("head_dim", default=256), hidden, heads))
    if family == "gemma2":
        out.update(norms_per_layer=4, **_window(cfg, layers, every=2, default=4096))
    elif family in ("gemma3", "gemma3_text"):
        every = cfg.int("sliding_window_pattern", "_sliding_window_pattern", default=6)
        out.update(norms_per_layer=4, qk_norm=QkNorm.HEAD, **_window(cfg, layers, every=every, default=4096))
    return out


def _gpt_neox(cfg: _Config) -> dict:
    """GPT-NeoX (transformers GPTNeoXLayer): fused query_key_value and dense with biases
    (attention_bias, default true), an MLP dense_h_to_4h -> GeLU -> dense_4h_to_h with
    biases, two LayerNorms per layer (also with use_parallel_residual), rotary embeddings on
    rotary_pct of each head (no weights), an untied embed_out by default."""
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    cfg.activation("hidden_act", default="gelu", allowed=GELUS, what="a GeLU")
    if not cfg.bool("attention_bias", True):
        raise SpecError(f"{cfg.where}: attention_bias is false; GPT-NeoX's MLP keeps its biases, and fitplan's "
                        f"linear_bias covers every linear layer; describe the model in a model spec file")
    return dict(num_layers=cfg.int("num_hidden_layers"), hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
                ffn_hidden_size=cfg.int("intermediate_size"), vocab_size=cfg.int("vocab_size"),
                max_seq_len=cfg.int("max_position_embeddings"), mlp=Mlp.GELU, norm=Norm.LAYERNORM,
                position=Position.ROPE, tied_embeddings=cfg.bool("tie_word_embeddings", False), linear_bias=True)


def _falcon(cfg: _Config) -> dict:
    """Falcon (transformers FalconAttention, FalconDecoderLayer): query_key_value of
    (a + 2g)*d with g = num_kv_heads (new_decoder_architecture), 1 (multi_query) or a;
    bias on every linear when `bias`; a GeLU MLP of ffn_hidden_size (default 4h); LayerNorm
    with biases; parallel_attn shares one input norm unless num_ln_in_parallel_attn is 2
    (the new architecture's default: ln_attn and ln_mlp); sequential blocks have two."""
    hidden = cfg.int("hidden_size", "n_embed")
    heads = cfg.int("num_attention_heads", "n_head")
    if cfg.bool("alibi", False):
        raise SpecError(f"{cfg.where}: alibi is true; fitplan's positions are rope or learned, not ALiBi; "
                        f"describe the model in a model spec file")
    new = cfg.bool("new_decoder_architecture", False)
    if new or not cfg.bool("multi_query", True):
        kv_heads = cfg.int("num_kv_heads", "n_head_kv", default=heads)
    else:
        kv_heads = 1
    cfg.activation("activation", default="gelu", allowed=GELUS, what="a GeLU")
    lns = cfg.int("num_ln_in_parallel_attn", default=2 if new else None)
    norms = 2 if not cfg.bool("parallel_attn", True) or lns == 2 else 1
    return dict(num_layers=cfg.int("num_hidden_layers", "n_layer"), hidden_size=hidden, num_heads=heads,
                num_kv_heads=kv_heads, ffn_hidden_size=cfg.int("ffn_hidden_size", default=4 * hidden),
                vocab_size=cfg.int("vocab_size"), max_seq_len=cfg.int("max_position_embeddings", default=2048),
                mlp=Mlp.GELU, norm=Norm.LAYERNORM, position=Position.ROPE, norms_per_layer=norms,
                tied_embeddings=cfg.bool("tie_word_embeddings", True), linear_bias=cfg.bool("bias", False))


def _deepseek(cfg: _Config) -> dict:
    """DeepSeek-V2/V3 (transformers DeepseekV2DecoderLayer, DeepseekV3DecoderLayer): MLA
    attention (MlaSpec; q_lora_rank null: a plain q_proj); layers from first_k_dense_replace
    on route to num_experts_per_tok of n_routed_experts SwiGLU experts of
    moe_intermediate_size plus n_shared_experts, the first ones keep a dense MLP of
    intermediate_size. DeepSeek-V3's router (DeepseekV3TopkRouter) holds
    e_score_correction_bias, one number per routed expert; DeepSeek's own V2 code has it with
    topk_method noaux_tc."""
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    cfg.activation("hidden_act", default="silu", allowed=SILUS, what="SiLU")
    if cfg.bool("attention_bias", False):
        raise SpecError(f"{cfg.where}: attention_bias is true; fitplan's MLA has no biases; describe the model "
                        f"in a model spec file")
    layers = cfg.int("num_hidden_layers")
    mla = MlaSpec(q_lora_rank=cfg.int("q_lora_rank", default=0), kv_lora_rank=cfg.int("kv_lora_rank"),
                  qk_nope_head_dim=cfg.int("qk_nope_head_dim"), qk_rope_head_dim=cfg.int("qk_rope_head_dim"),
                  v_head_dim=cfg.int("v_head_dim"))
    out = dict(num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
               ffn_hidden_size=cfg.int("intermediate_size"), vocab_size=cfg.int("vocab_size"),
               max_seq_len=cfg.int("max_position_embeddings"), mlp=Mlp.SWIGLU, norm=Norm.RMSNORM,
               position=Position.ROPE, tied_embeddings=cfg.bool("tie_word_embeddings", False), linear_bias=False,
               mla=mla)
    experts = cfg.int("n_routed_experts", default=None)
    if experts is None:   # DeepseekV2Config's default: every layer dense
        return out
    freq = cfg.int("moe_layer_freq", default=1)
    if freq != 1:
        raise SpecError(f"{cfg.where}: moe_layer_freq = {freq}; fitplan's MoE layers are every layer after "
                        f"first_k_dense_replace (moe_layer_freq 1); describe the model in a model spec file")
    bias = cfg.family != "deepseek_v2" or cfg.str("topk_method", default="greedy") == "noaux_tc"
    # group-limited routing (n_group groups, each token's experts from its best topk_group of them) is
    # DeepSeek's node-limited routing with a group per node (DeepSeek-V3 Sec. 3.2.2: at most 4 nodes)
    groups = cfg.int("n_group", default=1)
    out["moe"] = MoeSpec(num_experts=experts, experts_per_token=cfg.int("num_experts_per_tok"),
                         expert_ffn_size=cfg.int("moe_intermediate_size"),
                         num_shared_experts=cfg.int("n_shared_experts", default=0),
                         first_dense_layers=cfg.int("first_k_dense_replace", default=0), expert_bias=bias,
                         route_nodes=cfg.int("topk_group", default=None) if groups > 1 else None)
    out["mtp_depth"] = cfg.int("num_nextn_predict_layers", default=0)   # DeepSeek-V3's multi-token prediction
    return out


def _gpt_oss(cfg: _Config) -> dict:
    """gpt-oss (transformers GptOssDecoderLayer): grouped-query attention of head_dim with
    biases on q, k, v and o (attention_bias) and a learned sink logit per head (GptOssAttention
    .sinks); in every layer a router with a bias (GptOssTopKRouter: E x h weights, E biases)
    and num_local_experts experts of intermediate_size (GptOssExperts: gate_up_proj h -> 2f
    and down_proj f -> h, each with a bias), RMSNorm, RoPE, untied embeddings. The experts'
    activation is a clamped SwiGLU ((up + 1) * gate * sigmoid(1.702 gate)): SwiGLU's weights.
    Sliding-window attention on the sliding_attention layers of layer_types (GptOssConfig's
    default: every other layer, from the first)."""
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    layers = cfg.int("num_hidden_layers")
    cfg.activation("hidden_act", default="silu", allowed=SILUS, what="SiLU")
    if not cfg.bool("attention_bias", True):
        raise SpecError(f"{cfg.where}: attention_bias is false; gpt-oss's experts and router keep their biases, and "
                        f"fitplan's linear_bias covers every linear layer; describe the model in a model spec file")
    ffn = cfg.int("intermediate_size")
    moe = MoeSpec(num_experts=cfg.int("num_local_experts", "num_experts"),
                  experts_per_token=cfg.int("num_experts_per_tok", "experts_per_token"), expert_ffn_size=ffn,
                  expert_bias=True)
    return dict(num_layers=layers, hidden_size=hidden, num_heads=heads,
                num_kv_heads=cfg.int("num_key_value_heads", default=heads), ffn_hidden_size=ffn,
                vocab_size=cfg.int("vocab_size"), max_seq_len=cfg.int("max_position_embeddings"), mlp=Mlp.SWIGLU,
                norm=Norm.RMSNORM, position=Position.ROPE, tied_embeddings=cfg.bool("tie_word_embeddings", False),
                linear_bias=True, attention_sinks=True,
                head_dim=_head_dim(cfg.int("head_dim", default=None), hidden, heads), moe=moe,
                **_window(cfg, layers, every=2, default=128))
