"""A ModelSpec from a Hugging Face config.json, without transformers.

Families (model_type) and the fields read, as transformers writes them
(docs/engines.md#hugging-face-configjson-fields):

  gpt2      n_layer, n_embd, n_head, n_positions (older files: n_ctx), vocab_size,
            n_inner (null: 4*n_embd), activation_function (a GeLU), tie_word_embeddings
            (default true). Every linear has a bias, LayerNorm, learned positions.
  llama,    hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads
  mistral,  (missing or null: = heads), intermediate_size, vocab_size,
  qwen2     max_position_embeddings, tie_word_embeddings (default false), head_dim (missing
            or null: hidden/heads), hidden_act (silu: SwiGLU, 3 matrices). RMSNorm, RoPE.
            Llama/Mistral: biases from attention_bias / mlp_bias (default none).
            Qwen2: q/k/v projections have biases, o_proj and the MLP do not.
  mixtral   the Llama fields + num_local_experts, num_experts_per_tok (experts of intermediate_size).

The importer rule (docs/engines.md#hugging-face-configjson-fields): the canonical name
first, then the family alias (GPT-2's attribute_map: hidden_size -> n_embd, ...); defaults
only where transformers has a documented one (kv heads, head_dim, GPT-2's ffn, tying,
biases). Every other field is required, so a truncated file is an error that names the
field, not a silent default.
Fields that do not change memory (rope_theta, eps, dropout rates, dtype) are ignored.
"""
import difflib
import json
from pathlib import Path

from fitplan.errors import SpecError
from fitplan.files import parse_json, read_small_text
from fitplan.specs.model import MoeSpec, Mlp, ModelSpec, Norm, Position

DENSE_FAMILIES = ("gpt2", "llama", "mistral", "qwen2")
MOE_FAMILIES = ("mixtral",)
GELUS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate")
SILUS = ("silu", "swish")
_MISSING = object()


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
    off). The text has already been read as a model, so it parses."""
    config = json.loads(text)
    rates = [config.get(k) for k in DROPOUT_KEYS]
    return {"dropout": any(isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0 for r in rates)}


def model_from_hf_dict(config, *, where: str = "config.json", name: str = "hf-model",
                       source: str = "") -> ModelSpec:
    """The same, from an already parsed config.json object."""
    if not isinstance(config, dict):
        raise SpecError(f"{where}: expected a JSON object {{...}} at the top level, got "
                        f"{type(config).__name__}; is this a Hugging Face config.json?")
    family = config.get("model_type")
    if family is None:
        raise SpecError(f"{where}: no 'model_type'; add it (one of {', '.join(DENSE_FAMILIES)})")
    if not isinstance(family, str):
        raise SpecError(f"{where}: 'model_type' must be a string, got {family!r}")
    cfg = _Config(config, where, family)
    _refuse_experts(cfg)
    if family not in DENSE_FAMILIES + MOE_FAMILIES:
        close = difflib.get_close_matches(family, DENSE_FAMILIES + MOE_FAMILIES, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise SpecError(f"{where}: unknown model_type {family!r}; {hint}fitplan reads "
                        f"{', '.join(DENSE_FAMILIES + MOE_FAMILIES)}; describe other models in a model spec file")
    kwargs = _gpt2(cfg) if family == "gpt2" else _llama_like(cfg)
    if family in MOE_FAMILIES:
        try:
            kwargs.update(_mixtral_experts(cfg))
        except SpecError as err:
            raise _named(where, err) from None
    try:
        return ModelSpec(name=name, source=source, **kwargs)
    except SpecError as err:
        raise _named(where, err) from None


def _named(where: str, err: SpecError) -> SpecError:
    """The file's name in front of a spec's own message, once (the config reader's already has it)."""
    text = str(err)
    return SpecError(text if text.startswith(f"{where}: ") else f"{where}: {text}")


def _config_file(path: Path) -> Path:
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

    def str(self, name: str, default: str) -> str:
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise SpecError(f"{self.where}: {name!r} must be a string, got {value!r}")
        return value


def _refuse_experts(cfg: _Config) -> None:
    """Experts in a dense family (e.g. a Qwen2-MoE config labelled qwen2) would be counted
    wrongly: refuse, naming the field."""
    counts = [f for f in ("num_local_experts", "num_experts")
              if isinstance(cfg.data.get(f), int) and not isinstance(cfg.data[f], bool) and cfg.data[f] > 1]
    if cfg.family in MOE_FAMILIES or not counts:
        return
    raise SpecError(f"{cfg.where}: {counts[0]} = {cfg.data[counts[0]]} in a {cfg.family} config; fitplan reads "
                    f"experts from {', '.join(MOE_FAMILIES)} configs only; use a model spec file with a "
                    f"[model.moe] table")


def _mixtral_experts(cfg: _Config) -> dict:
    """Mixtral: every layer routes to num_experts_per_tok of num_local_experts SwiGLU experts
    of intermediate_size (dropless, Jiang et al. 2024)."""
    return dict(moe=MoeSpec(num_experts=cfg.int("num_local_experts"), experts_per_token=cfg.int("num_experts_per_tok"),
                            expert_ffn_size=cfg.int("intermediate_size")))


def _gpt2(cfg: _Config) -> dict:
    hidden = cfg.int("n_embd", "hidden_size")
    heads = cfg.int("n_head", "num_attention_heads")
    activation = cfg.str("activation_function", "gelu_new")
    if activation not in GELUS:
        raise SpecError(f"{cfg.where}: activation_function {activation!r} is not a GeLU; fitplan's gpt2 MLP "
                        f"is fc1 -> GeLU -> fc2 (one of {', '.join(GELUS)})")
    if cfg.bool("add_cross_attention", False):
        raise SpecError(f"{cfg.where}: add_cross_attention is true; fitplan models decoder-only GPT-2 "
                        f"without cross-attention; set it to false")
    return dict(num_layers=cfg.int("n_layer", "num_hidden_layers"), hidden_size=hidden, num_heads=heads,
                num_kv_heads=heads, ffn_hidden_size=cfg.int("n_inner", default=4 * hidden),
                vocab_size=cfg.int("vocab_size"),
                max_seq_len=cfg.int("n_positions", "n_ctx", "max_position_embeddings"),
                mlp=Mlp.GELU, norm=Norm.LAYERNORM, position=Position.LEARNED,
                tied_embeddings=cfg.bool("tie_word_embeddings", True), linear_bias=True)


def _llama_like(cfg: _Config) -> dict:
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    head_dim = cfg.int("head_dim", default=None)
    activation = cfg.str("hidden_act", "silu")
    if activation not in SILUS:
        raise SpecError(f"{cfg.where}: hidden_act {activation!r} is not SiLU; fitplan's {cfg.family} MLP is "
                        f"SwiGLU (gate/up/down with SiLU); set hidden_act to \"silu\" or use a model spec file")
    out = dict(num_layers=cfg.int("num_hidden_layers"), hidden_size=hidden, num_heads=heads,
               num_kv_heads=cfg.int("num_key_value_heads", default=heads),
               ffn_hidden_size=cfg.int("intermediate_size"), vocab_size=cfg.int("vocab_size"),
               max_seq_len=cfg.int("max_position_embeddings"), mlp=Mlp.SWIGLU, norm=Norm.RMSNORM,
               position=Position.ROPE, tied_embeddings=cfg.bool("tie_word_embeddings", False),
               # head_dim = hidden/heads is the default and is stored as None, like the presets
               head_dim=None if head_dim is None or head_dim * heads == hidden else head_dim)
    out.update(_qwen2_biases(cfg) if cfg.family == "qwen2" else _llama_biases(cfg))
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
