"""Fine-tuning with LoRA and QLoRA: a frozen base, rank-r adapters, and what they store.

Symbols as in fitplan.memory.activations, plus r the adapter rank, P_lin one layer's linear
weight matrices (attention and MLP: fitplan.counts.params.layer_matmul_params), D one layer's
sum of d_in + d_out over the adapted matrices, N_ad the adapters per layer, P_a the adapter
parameters one GPU holds.

LoRA [lora Sec. 4.1] adds to each adapted matrix W (d_in x d_out) two trained factors A
(d_in x r) and B (r x d_out): y = x W + (x A) B * alpha/r, r*(d_in + d_out) parameters. The
targets (TrainingSpec.lora_targets) are the q, k and v projections (three adapters, the
Hugging Face layout peft adapts), the attention output projection (one), and every MLP
matrix (fc1 and fc2, or gate, up and down). QLoRA [qlora Sec. 3] stores the frozen base's
linear weights in 4-bit NormalFloat with double quantization; embedding, head, norms and
biases stay at the recipe's weight bytes (bitsandbytes replaces nn.Linear layers only, and
qlora.py adapts no lm_head).

States: the base is frozen, so it has no gradients, master copy or optimizer moments; the
adapters carry the recipe's weights, gradients, master weights and moments, sharded by ZeRO
like any trained parameter.

Activations: a frozen matrix's weight gradient is not computed, so its input is not kept
(autograd saves a matmul's input only for its weight's gradient;
docs/engines.md#frozen-weights-keep-no-input). Per layer
and micro-batch, against fitplan.memory.activations:
  R  the two norm inputs (2e*sbh) and dropout masks as before; a norm's output only where an
     adapter reads it: LN1's for qkv, LN2's for mlp (e*sbh each)
  T  Q, K and V (the attention core's inputs) as before; the output projection's input only
     under o; the MLP's tensors before its last matrix ((n - 1)*e*sbf) as before, the last
     matrix's input (e*sbf) only under mlp; and each adapter's rank-r intermediate x A,
     e*sb*r per adapter
  S  the attention core, unchanged
The layer's input is taken to require a gradient, as peft's enable_input_require_grads makes
it (otherwise the first adapted layer stores less).
"""
from fitplan.arith import ceil_div, maximum, select
from fitplan.counts import params as P
from fitplan.explain import COUNT, formula
from fitplan.memory import activations as A
from fitplan.memory import runtime as RT
from fitplan.memory import states as S
from fitplan.sources import Cite
from fitplan.specs.parallel import Recompute

LORA = Cite("lora", "Sec. 4.1 (W + BA, r*(d_in + d_out) parameters per adapted matrix)")
QLORA_DQ = Cite("qlora", "Sec. 3, Double Quantization: 4-bit NF4, blocksize 64, 8-bit constants in blocks of 256")
LORA_ACTS = Cite("fitplan", "formulas.md#lora-and-qlora")
FSDP_QLORA = Cite("fsdp-qlora", "bitsandbytes nn/modules.py Params4bit: the packed data in quant_storage's dtype is "
                                "the parameter FSDP shards; quant_state is an attribute, copied whole onto every chunk "
                                "and restored from the Linear4bit after the all-gather "
                                "(fix_4bit_weight_quant_state_from_module)")

# NormalFloat-4 with double quantization [qlora Sec. 3]: 4 bits a weight; per block of 64 weights its absmax
# quantized to 8 bits; per 256 of those, one fp32 constant of the second level: 4 + 8/64 + 32/(64*256) bits.
NF4_BLOCK, NF4_BLOCK2 = 64, 256


def is_lora(training) -> bool:
    return training.finetune != "full"


def targets(training) -> tuple[bool, bool, bool]:
    """(qkv, o, mlp): which layers carry adapters."""
    names = training.lora_targets.split(",")
    return "qkv" in names, "o" in names, "mlp" in names


def base_precision(training) -> str:
    """The frozen linear weights' precision: the one given, else nf4 for qlora and the
    recipe's own weights ("recipe") for lora."""
    if training.base_precision is not None:
        return training.base_precision
    return "nf4" if training.finetune == "qlora" else "recipe"


def adapter_dims(model, training) -> tuple[int, int]:
    """(D, N_ad) of one dense layer: the sum of d_in + d_out over its adapted matrices, and
    how many adapters it has."""
    h, q, kv, f = model.hidden_size, model.q_size, model.kv_size, model.ffn_hidden_size
    qkv, o, mlp = targets(training)
    n = 3 if model.mlp.gated else 2
    D = qkv * (3 * h + q + 2 * kv) + o * (q + h) + mlp * n * (h + f)
    return D, 3 * qkv + o + n * mlp


def linear_params(model) -> int:
    """One layer's linear weight matrices (no biases): what QLoRA quantizes."""
    return P.layer_matmul_params(model, moe_layer=False)


def largest_linear(model) -> int:
    """The largest weight matrix of a layer, dequantized whole before its GEMM."""
    h, q, kv, f = model.hidden_size, model.q_size, model.kv_size, model.ffn_hidden_size
    return max(h * q, h * kv, h * f)


@formula("params/lora_adapters", "l*ceil(r*D/t)  (D: d_in + d_out summed over a layer's adapted matrices)", LORA,
         COUNT, ("adapters spread evenly over tp (frameworks shard the side that matches their layer's split)",))
def adapter_params(*, l, r, D, t):
    return l * ceil_div(r * D, t)


@formula("params/stage_linear_weights", "l*ceil(P_lin/t)", Cite("fitplan", "formulas.md#lora-and-qlora"), COUNT)
def stage_linear_params(*, l, P_lin, t):
    """The stage's layer weight matrices on one GPU (biases and norms excluded)."""
    return l * ceil_div(P_lin, t)


def _quant_text(*, precision, **_):
    return {"nf4": "psi/2 + psi/64 + 4*psi/(64*256)  (NF4, double-quantized: 4.127 bits a weight)",
            "int8": "psi  (int8)", "bf16": "2*psi", "recipe": "w*psi"}[precision]


@formula("states/base_linear_weights", _quant_text, QLORA_DQ,
         assumes=("per-tensor constants (NF4's 16-value code, the 256-value fp32 code of the second level, its "
                  "offset; int8's per-row scales) are under 0.1% and not counted",))
def quantized_weight_bytes(*, psi, precision, w=2):
    """Bytes of psi frozen linear weights: NF4 with double quantization [qlora Sec. 3]: half a
    byte each, one 8-bit absmax per block of 64, one fp32 per 256 blocks; int8 (LLM.int8) one
    byte; bf16 two; "recipe" the recipe's w."""
    if precision == "nf4":
        return ceil_div(psi, 2) + ceil_div(psi, NF4_BLOCK) + 4 * ceil_div(psi, NF4_BLOCK * NF4_BLOCK2)
    if precision == "int8":
        return psi
    return (2 if precision == "bf16" else w) * psi


def _constants_text(*, precision, **_):
    if precision == "nf4":
        return "psi/64 + 4*psi/(64*256)  (NF4's 8-bit absmax per 64 weights, an fp32 constant per 256 of them)"
    return "0  (no block constants counted)"


@formula("states/base_quant_constants", _constants_text, FSDP_QLORA,
         assumes=("a 4-bit base keeps its quantization constants (bitsandbytes' quant_state) outside the parameters "
                  "FSDP shards: whole on every GPU, never gathered; torchao's NF4Tensor (torchtune) shards and "
                  "gathers them with the data instead",))
def quant_constant_bytes(*, psi, precision):
    """The part of quantized_weight_bytes that is block constants rather than weights: NF4's
    double-quantized absmax [qlora Sec. 3]; 0 for the other precisions."""
    if precision == "nf4":
        return ceil_div(psi, NF4_BLOCK) + 4 * ceil_div(psi, NF4_BLOCK * NF4_BLOCK2)
    return 0 * psi


@formula("states/frozen_sharded", "W_lin - C_q + w*(psi - psi_lin) + w*P_a  (the frozen base and the adapters as "
                                  "FSDP shards and gathers them: the linear weights' packed data, the rest and the "
                                  "adapters at w)", FSDP_QLORA,
         assumes=("QLoRA under FSDP stores the packed 4-bit weights in a float dtype (bnb_4bit_quant_storage, as "
                  "the model's), so FSDP shards and all-gathers them as they are, half a byte a weight",))
def frozen_sharded_bytes(*, W_lin, C_q, psi, psi_lin, P_a, w):
    """What ZeRO-3 shards of psi frozen parameters (psi_lin of them linear weights stored in
    W_lin bytes, C_q of those block constants) with P_a adapters, and what its all-gather
    fills: everything but the constants."""
    return W_lin - C_q + ceil_div(w * maximum(psi - psi_lin, 0), 1) + ceil_div(w * P_a, 1)


@formula("states/weights", lambda *, zero, **_: "W_shard/N_d + C_q" if zero >= 3 else "W_shard  (C_q within it)",
         Cite("fitplan", "formulas.md#lora-and-qlora (frozen base + adapters; ZeRO-3 shards all but the quantization "
                         "constants)"))
def frozen_weights_bytes(*, W_shard, C_q, n_d, zero):
    """The base's linear weights at their precision, its other parameters (embedding, head,
    norms, biases) and the adapters at the recipe's w (W_shard: frozen_sharded_bytes); ZeRO-3
    shards them over N_d, all but the quantization constants C_q, which every GPU keeps."""
    return select(zero >= 3, ceil_div(W_shard, n_d), W_shard) + C_q


@formula("runtime/gathered_weights", "W_shard  (the stage's frozen base and adapters as FSDP gathers them, beside "
                                     "their shards)", FSDP_QLORA)
def gathered_frozen_bytes(*, W_shard, keep):
    """runtime/gathered_weights with a frozen base: the stage's sharded bytes, whole (keep: 1
    where the gathered weights stay, fitplan.memory.breakdown.kept_gathered)."""
    return keep * W_shard


def fsdp_units(ev, setup, c, *, P_layer, P_head) -> dict:
    """fitplan.memory.runtime.fsdp_buffers_bytes's units with a frozen base: a layer gathers its
    P_layer base parameters as sharded (frozen_sharded_bytes: an NF4 base's packed 4-bit data,
    not bf16) and its adapters, which are all it trains; the output unit (final norm and head:
    frozen, no adapter) gathers at w and trains nothing."""
    model, training, recipe = setup.model, setup.training, setup.training.recipe
    w, precision = recipe.weights_bytes, base_precision(training)
    P_a = ev(adapter_params, key="params/lora_adapters_layer", l=1, r=training.lora_rank,
             D=adapter_dims(model, training)[0], t=c.tp)
    lin = ev(stage_linear_params, key="params/linear_weights_layer", l=1, P_lin=linear_params(model), t=c.tp)
    W_lin = ev(quantized_weight_bytes, key="runtime/fsdp_layer_base_linear", psi=lin, precision=precision, w=w)
    C_q = ev(quant_constant_bytes, key="runtime/fsdp_layer_quant_constants", psi=lin, precision=precision)
    return {"W_layer": ev(frozen_sharded_bytes, key="runtime/fsdp_layer_weights", W_lin=W_lin, C_q=C_q, psi=P_layer,
                          psi_lin=lin, P_a=P_a, w=w),
            "W_head": ev(RT.fsdp_unit_bytes, key="runtime/fsdp_head_weights", c=w, P=P_head),
            "T_layer": P_a, "T_head": 0 * P_head}


def _adapter_text(symbol: str, key: str):
    def text(*, zero, **_):
        return f"{symbol}*P_a/N_d" if S.is_sharded(key, zero) else f"{symbol}*P_a"
    return text


def _adapter_state(key, P_a, per_param, n_d, zero):
    return ceil_div(P_a * per_param, select(S.is_sharded(key, zero), n_d, 1))


@formula("comm/dp_param_message", "w*P_a  (only the adapters change in a step)", LORA)
def adapter_weights_bytes(*, P_a, w):
    return ceil_div(P_a * w, 1)


@formula("states/grads", _adapter_text("g", "states/grads"), LORA)
def adapter_grads_bytes(*, P_a, g, n_d, zero):
    """Only the adapters have gradients."""
    return _adapter_state("states/grads", P_a, g, n_d, zero)


@formula("states/master", _adapter_text("m", "states/master"), LORA)
def adapter_master_bytes(*, P_a, m, n_d, zero):
    return _adapter_state("states/master", P_a, m, n_d, zero)


@formula("states/optimizer", _adapter_text("K", "states/optimizer"), LORA)
def adapter_optimizer_bytes(*, P_a, K, n_d, zero):
    return _adapter_state("states/optimizer", P_a, K, n_d, zero)


def _lora_layer_text(*, recompute, sp, qkv, o, mlp, **_):
    if recompute == Recompute.FULL:
        return "e*s*b*h/(t*c)" if sp else "e*s*b*h/c"
    core = "" if recompute == Recompute.SELECTIVE else " + S"
    rep = "R" if sp else "R*t"
    ln = "2e" + (" + e" if qkv else "") + (" + e" if mlp else "")
    t_parts = "e*(q+2kv)" + (" + e*q" if o else "") + " + (n-1)*e*f" + (" + e*f" if mlp else "") + " + e*r*N_ad"
    return f"({rep} + T{core})/(t*c), R=s*b*h*({ln} + 2DM), T=s*b*({t_parts})"


@formula("activations/per_layer", _lora_layer_text, LORA_ACTS,
         assumes=("frozen matrices keep no input: only adapted ones (their A factor) and the attention core do",
                  "adapters without dropout on their input (peft's lora_dropout > 0 keeps a dropped copy of each "
                  "adapted matrix's input, e*s*b*d_in, and its 1-byte mask)",
                  "the layer input requires a gradient (peft's enable_input_require_grads)"))
def lora_layer_bytes(*, s, b, h, a, q, kv, f, n, e, M, D, t, c, sp, recompute, kernel="eager", r, N_ad, qkv, o,
                     mlp, e_l=None):
    """Bytes one layer with a frozen base and rank-r adapters stores for one micro-batch on one
    GPU. D here is the dropout indicator (1 with dropout), as in per_layer_bytes. e_l (a low-precision
    recipe's linear inputs) does not apply: a frozen linear keeps no input (its weight gets no gradient),
    and the adapters run in the activations' precision."""
    if recompute == Recompute.FULL:
        return ceil_div(e * s * b * h, select(sp, t, 1) * c)
    R = s * b * h * (2 * e + e * qkv + e * mlp + 2 * D * M)
    T = s * b * (e * (q + 2 * kv) + e * q * o + (n - 1) * e * f + e * f * mlp + e * r * N_ad)
    S_core = 0 if recompute == Recompute.SELECTIVE else A.attention_core_bytes(s=s, b=b, a=a, e=e, M=M, D=D,
                                                                               kernel=kernel)
    return ceil_div(R * select(sp, 1, t) + T + S_core, t * c)


@formula("activations/recompute_workspace",
         lambda *, recompute, **_: {"none": "0", "selective": "S/(t*c)  (one layer's attention core)",
                                    "full": "one LoRA layer without recompute"}[str(recompute)],
         Cite("fitplan", "formulas.md#recompute-workspace"))
def lora_workspace_bytes(*, s, b, h, a, q, kv, f, n, e, M, D, t, c, sp, recompute, kernel="eager", r, N_ad, qkv, o,
                         mlp, e_l=None):
    if recompute == Recompute.NONE:
        return 0 * b
    if recompute == Recompute.FULL:
        return lora_layer_bytes(s=s, b=b, h=h, a=a, q=q, kv=kv, f=f, n=n, e=e, M=M, D=D, t=t, c=c, sp=sp,
                                recompute=Recompute.NONE, kernel=kernel, r=r, N_ad=N_ad, qkv=qkv, o=o, mlp=mlp)
    return ceil_div(A.attention_core_bytes(s=s, b=b, a=a, e=e, M=M, D=D, kernel=kernel), t * c)


@formula("runtime/dequant_workspace", "2*P_max/t  (the largest weight matrix, dequantized to bf16 for its GEMM)",
         Cite("qlora", "Sec. 3: weights dequantized to the bf16 compute dtype for each matmul"),
         assumes=("one matrix is dequantized at a time (bitsandbytes matmul_4bit / Linear8bitLt)",))
def dequant_workspace_bytes(*, P_max, t):
    return ceil_div(2 * P_max, t)


def lora_kw(setup) -> dict:
    """The keywords lora_layer_bytes adds to a per-layer call: r, N_ad and the targets."""
    tr = setup.training
    qkv, o, mlp = targets(tr)
    return dict(r=tr.lora_rank, N_ad=adapter_dims(setup.model, tr)[1], qkv=int(qkv), o=int(o), mlp=int(mlp))


def check_supported(model, training) -> str | None:
    """Why this model and training cannot be fine-tuned with adapters here, or None."""
    if not is_lora(training):
        return None
    if model.hybrid:
        return ("--finetune lora/qlora: adapters on a hybrid model's Mamba layers are not modelled; use --finetune "
                "full")
    if model.moe is not None:
        return ("--finetune lora/qlora: adapters on mixture-of-experts layers are not modelled; plan a dense model, "
                "or --finetune full")
    if model.mla is not None:
        return "--finetune lora/qlora: adapters on MLA attention are not modelled; plan a model with GQA/MHA attention"
    if training.recipe.compute != "bf16" and training.finetune == "qlora":
        return (f"--finetune qlora: {training.recipe.compute} compute on a 4-bit base is not modelled (QLoRA "
                f"dequantizes to bf16 for its GEMMs); use a bf16 recipe (--precision), or --finetune lora")
    return None


def dp_messages(ev, setup, c, *, stages, psi):
    """The data-parallel messages of a stage with adapters: the adapters' gradients (g*P_a),
    and the weights gathered: ZeRO-3 gathers the whole stage's, the frozen base as sharded
    (frozen_sharded_bytes: no quantization constants); ZeRO-1/2's all-gather after the step
    only the updated adapters (the larger of the first and last stages)."""
    model, training, recipe = setup.model, setup.training, setup.training.recipe
    D = adapter_dims(model, training)[0]
    grads = weights = 0
    for st in stages:
        P_a = ev(adapter_params, key="params/lora_adapters_dp", l=st.layers, r=training.lora_rank, D=D, t=c.tp)
        lin = ev(stage_linear_params, key="params/stage_linear_weights_dp", l=st.layers, P_lin=linear_params(model),
                 t=c.tp)
        precision = base_precision(training)
        W_lin = ev(quantized_weight_bytes, key="comm/dp_base_linear_weights", psi=lin, precision=precision,
                   w=recipe.weights_bytes)
        grads = maximum(grads, ev(adapter_grads_bytes, key="comm/dp_grad_message", P_a=P_a, g=recipe.grads_bytes,
                                  n_d=1, zero=0))
        if c.zero >= 3:
            C_q = ev(quant_constant_bytes, key="comm/dp_quant_constants", psi=lin, precision=precision)
            W = ev(frozen_sharded_bytes, key="comm/dp_param_message", W_lin=W_lin, C_q=C_q, psi=psi, psi_lin=lin,
                   P_a=P_a, w=recipe.weights_bytes)
        else:
            W = ev(adapter_weights_bytes, P_a=P_a, w=recipe.weights_bytes)
        weights = maximum(weights, W)
    return grads, weights


def model_totals(model, training, psi: int) -> tuple[int, int]:
    """(the frozen base's bytes, the adapters' parameters) over the whole model, unsharded:
    psi all parameters, of which L*P_lin are quantized linear weights."""
    recipe = training.recipe
    lin = model.num_layers * linear_params(model)
    adapters = model.num_layers * training.lora_rank * adapter_dims(model, training)[0]
    base = int(quantized_weight_bytes(psi=lin, precision=base_precision(training), w=recipe.weights_bytes)
               + recipe.weights_bytes * max(psi - lin, 0))
    return base, adapters
