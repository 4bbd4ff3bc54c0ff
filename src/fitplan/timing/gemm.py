"""GEMM time by shape, and the sustained efficiency of a layer's GEMMs.

One GEMM multiplies g pairs of an (m x k) by a (k x n) matrix: F = 2*g*m*n*k FLOPs, and
at least B = g*(e_in*(m*k + k*n) + e_out*m*n) bytes of operands read and result written.
Its time (formulas.md#gemm-efficiency), a roofline with a fixed cost:

  T = max(F/(eff_max*peak), B/W) + t0

the FLOPs at a ceiling eff_max of the dense peak (the plateau large GEMMs reach), or the
operands at a bandwidth W if that takes longer, plus a fixed t0 per kernel (launch,
pipeline fill and drain, the last partial wave). Its efficiency F/(peak*T) rises with the
GEMM's size (t0 amortised) and arithmetic intensity F/B, and saturates at eff_max.
eff_max (per dtype), t0 and W are fitted per die by bench/calibrate.py to measured GEMM
throughput by shape (bench/gemm_points.csv) and stored in the GPU presets
(fitplan.presets.gpus); W comes out near each die's HBM bandwidth.

A layer's GEMMs are listed at the stage's degrees (tensor parallel t, context parallel c,
expert parallel ep, micro-batch b); the step takes the layer's linears, its attention core
and the output layer each at their sustained efficiency, the FLOP-weighted harmonic mean
of their GEMMs' (sum F / (peak * sum T)). Backward GEMMs (dgrad, wgrad) have the forward's
three dimensions in another order and are taken to cost as much.

Symbols: T tokens per GPU per micro-batch (b*s/c), h hidden size, q = a*d query width, kv
key/value width, f ffn size, E experts, k_r experts per token, rho the busiest rank's load,
V vocabulary.
"""

from fitplan.arith import maximum, select
from fitplan.explain import COUNT, RATIO, SECONDS, formula, layout_inputs, once
from fitplan.record import record
from fitplan.sources import Cite
from fitplan.specs.training import LOW_PRECISION_BYTES
from fitplan.timing import elementwise as E

GEMM = Cite("fitplan", "formulas.md#gemm-efficiency (constants: bench/calibrate.py on bench/gemm_points.csv)")
@formula("time/gemm", "max(2*g*m*n*k/(eff_max*peak), g*(e_in*(m*k + k*n) + e_out*m*n)/W) + t0", GEMM, SECONDS,
         ("a GEMM runs at eff_max of the dense peak unless moving its operands (read once) and result (written "
          "once) at W takes longer; t0 per kernel (no W: the operand term is left out)",))
def gemm_s(*, m, n, k, eff_max, peak, t0, W=None, g=1, e_in=2, e_out=2):
    compute = 2 * g * m * n * k / (eff_max * peak)
    if W is None:
        return compute + t0
    return maximum(compute, g * (e_in * (m * k + k * n) + e_out * m * n) / W) + t0


@formula("ratio/gemm_efficiency", "F/(peak*T_gemm), F = 2*g*m*n*k, T_gemm = max(F/(eff_max*peak), B/W) + t0", GEMM,
         RATIO, ("efficiency rises with the GEMM's size (t0 amortised) and arithmetic intensity F/B, saturating at "
                 "eff_max",))
def gemm_efficiency(*, m, n, k, eff_max, peak, t0, W=None, g=1, e_in=2, e_out=2):
    """The fraction of peak one GEMM sustains: works on ints, floats and NumPy arrays."""
    F = 2 * g * m * n * k
    return F / (peak * gemm_s.fn(m=m, n=n, k=k, eff_max=eff_max, peak=peak, t0=t0, W=W, g=g, e_in=e_in,
                                 e_out=e_out))


@formula("ratio/sustained_efficiency", "sum F/(peak*sum T)  (the FLOP-weighted harmonic mean of the GEMMs')",
         GEMM, RATIO)
def sustained_efficiency(*, F, T, peak):
    return F / (peak * T)


@record(slots=True)
class Gemm:
    """One GEMM of a layer on one GPU: g groups (heads, local experts) of (m x k)(k x n).
    Dimensions are ints for one configuration, arrays over the search's candidates."""
    name: str
    m: object
    n: object
    k: object
    g: object = 1

    @property
    def flops(self):
        return 2 * self.g * self.m * self.n * self.k


def attention_linears(model, *, T, t) -> tuple[Gemm, ...]:
    """Q, K, V and output projections (Megatron column/row-parallel: n or k split by t). MLA:
    the down-projections to the latents replicated on every tp rank, the up-projections and
    the output split."""
    h, mla = model.hidden_size, model.mla
    if mla is None:
        return (Gemm("qkv", T, (model.q_size + 2 * model.kv_size) / t, h),
                Gemm("attention_out", T, h, model.q_size / t))
    a = model.num_heads
    out = [Gemm("kv_down", T, mla.kv_lora_rank + mla.qk_rope_head_dim, h)]
    if mla.q_lora_rank:
        out.append(Gemm("q_down", T, mla.q_lora_rank, h))
    out += [Gemm("q_up", T, a * (mla.qk_nope_head_dim + mla.qk_rope_head_dim) / t, mla.q_lora_rank or h),
            Gemm("kv_up", T, a * (mla.qk_nope_head_dim + mla.v_head_dim) / t, mla.kv_lora_rank),
            Gemm("attention_out", T, h, a * mla.v_head_dim / t)]
    return tuple(out)


def mlp_linears(model, *, T, t, f, tag="mlp", g=1, width=None) -> tuple[Gemm, ...]:
    """A dense MLP of width f split by t: the up (and gate) projection, then the down one
    (width: its input's, h or a LatentMoE expert's latent)."""
    n_up = 2 if model.mlp.gated else 1
    w = model.hidden_size if width is None else width
    return (Gemm(f"{tag}_up", T, n_up * f / t, w, g), Gemm(f"{tag}_down", T, w, f / t, g))


def moe_gemms(model, *, T, t, ep=1, rho=1) -> tuple[Gemm, ...]:
    """An MoE block's GEMMs (Megatron-LM's MoELayer, expert tensor parallel 1): the router; the
    shared experts as a dense MLP split by t; LatentMoE's h -> l and l -> h projections
    (replicated, on the rank's T/t sequence-sharded tokens); the E/ep local experts as one
    grouped GEMM each way, every expert receiving T_e = k_r*rho*T*ep/(t*E) tokens."""
    e, h = model.moe, model.hidden_size
    out = (Gemm("router", T, e.num_experts, h),)
    if e.num_shared_experts:
        out += mlp_linears(model, T=T, t=t, f=e.num_shared_experts * e.expert_ffn_size, tag="shared")
    if e.latent_size is not None:
        out += (Gemm("latent_down", T / t, e.latent_size, h), Gemm("latent_up", T / t, h, e.latent_size))
    T_e = e.experts_per_token * rho * T * ep / (t * e.num_experts)
    return out + mlp_linears(model, T=T_e, t=1, f=e.expert_ffn_size, tag="experts", g=e.num_experts / ep,
                             width=e.latent_size)


def linear_gemms(model, *, T, t, ep=1, moe_layer=False, rho=1) -> tuple[Gemm, ...]:
    """The layer's linear GEMMs on one GPU for T tokens: attention, then the MLP or the MoE
    block (moe_gemms; the tp ranks dispatch their T/t sequence-sharded tokens)."""
    out = attention_linears(model, T=T, t=t)
    if not moe_layer:
        return out + mlp_linears(model, T=T, t=t, f=model.ffn_hidden_size)
    return out + moe_gemms(model, T=T, t=t, ep=ep, rho=rho)


def mamba_linears(model, *, T, t) -> tuple[Gemm, ...]:
    """A Mamba layer's projections (Megatron-LM MambaMixer: in_proj column-parallel, out_proj
    row-parallel); Mamba (mamba1) adds x_proj (d -> R + 2N) and dt_proj (R -> d)."""
    from fitplan.counts import hybrid as HY
    m, h = model.mamba, model.hidden_size
    out = (Gemm("mamba_in_proj", T, HY.in_proj_width(model) / t, h), Gemm("mamba_out_proj", T, h, m.d_inner / t))
    if m.version.value == "mamba1":
        R = HY.dt_rank(model)
        out += (Gemm("mamba_x_proj", T, R + 2 * m.state_size, m.d_inner / t), Gemm("mamba_dt_proj", T, m.d_inner / t, R))
    return out


def block_gemms(model, kind: str, *, T, t, ep=1, rho=1) -> tuple[Gemm, ...]:
    """A hybrid model's layer of `kind` (M, *, -, E): its linear GEMMs on one GPU for T tokens."""
    if kind == "M":
        return mamba_linears(model, T=T, t=t)
    if kind == "*":
        return attention_linears(model, T=T, t=t)
    if kind == "-":
        return mlp_linears(model, T=T, t=t, f=model.ffn_hidden_size)
    return moe_gemms(model, T=T, t=t, ep=ep, rho=rho)


def ssd_gemms(model, *, b, s, t, c) -> tuple[Gemm, ...]:
    """A Mamba-2 layer's chunked scan per GPU as batched GEMMs (fitplan.counts.flops.ssd_flops):
    over the b*s/(c*Q) chunks of Q tokens, C^T B for each of the G/t local groups, then for each
    of the H/t local heads the intra-chunk output (Q x Q by Q x P), the chunk state (N x Q by
    Q x P) and the inter-chunk output (Q x N by N x P)."""
    m = model.mamba
    Q, N, P = m.chunk_size, m.state_size, m.head_dim
    chunks = b * s / (c * Q)
    heads, groups = chunks * m.num_heads / t, chunks * m.num_groups / t
    return (Gemm("ssd_cb", Q, Q, N, groups), Gemm("ssd_intra", Q, P, Q, heads), Gemm("ssd_state", N, P, Q, heads),
            Gemm("ssd_inter", Q, P, N, heads))


def core_gemms(model, *, b, s, t, c) -> tuple[Gemm, ...]:
    """An eager attention core per GPU: b*a/t heads of s/c local queries against s keys, the scores
    Q K^T and the context P V as two batched GEMMs (the s^2 scores written and read back). A flash
    kernel is timed at its benchmarked efficiency instead (flash_core_efficiency)."""
    a = model.num_heads
    d_qk, d_v = model.q_size / a, model.kv_size / a if model.mla is not None else model.q_size / a
    heads, q_len = b * a / t, s / c
    return (Gemm("attention_scores", q_len, s, d_qk, heads), Gemm("attention_context", q_len, d_v, s, heads))


def head_gemms(model, *, T, t) -> tuple[Gemm, ...]:
    """The output layer (vocabulary-parallel: n split by t)."""
    return (Gemm("output_layer", T, model.vocab_size / t, model.hidden_size),)


# ---------------------------------------------------------------- a stage's rates, for fitplan.timing.step

@record(slots=True)
class Rate:
    """How one class of GEMMs runs: its ceiling (after the legacy h0 factor), its dense peak
    and its input element's bytes."""
    eff_max: object
    peak: float
    e_in: int


@record(slots=True)
class LayerRates:
    """What the step needs per micro-batch: the sustained efficiency (and peak) of the stage's
    linear GEMMs, attention core and output layer, and the memory-bound seconds per layer:
    forward elementwise traffic, what a recompute reruns of it, and fp8 casts each way."""
    linear: object
    core: object
    head: object
    peak_linear: float
    peak: float
    mem_s: object
    rerun_mem_s: object
    cast_forward_s: object
    cast_backward_s: object
    ssm: object = 1     # the Mamba-2 scans' sustained efficiency (bf16), hybrid models


def rates(ev, gpu, *, h, compute: str, clock=1.0) -> dict:
    """The bf16 and linear-GEMM rates of a GPU for a recipe's precision; clock: the fraction of the
    boost clock compute-bound kernels sustain (fitplan.timing.calibration), scaling each ceiling."""
    from fitplan.timing import compute as C
    bf16 = Rate(ev(C.gemm_ceiling, key="ratio/gemm_ceiling", eff_max=gpu.efficiency, h=h, h0=gpu.efficiency_h0,
                   clock=clock), gpu.peak_bf16_flops_per_s, 2)
    if compute == "bf16":
        return {"bf16": bf16, "linear": bf16}
    # a low precision's GEMMs at the fp8 ceiling (no measured MXFP8 or NVFP4 curve: an assumption, said)
    low_max = gpu.efficiency if gpu.efficiency_fp8 is None else gpu.efficiency_fp8
    low = Rate(ev(C.gemm_ceiling, key="ratio/gemm_ceiling_fp8", eff_max=low_max, h=h, h0=gpu.efficiency_h0,
                  clock=clock), C.peak_flops_per_s(gpu, compute), LOW_PRECISION_BYTES[compute])
    out = {"bf16": bf16, "linear": low}
    if compute == "mxfp8" and gpu.architecture in GROUPED_MXFP8_ARCHITECTURES:
        out["grouped"] = Rate(ev(grouped_mxfp8_ceiling, key="ratio/gemm_ceiling_grouped", eff_max=low.eff_max,
                                 scale=GROUPED_MXFP8_SCALE), low.peak, low.e_in)
    return out


# Megatron-Core's MXFP8 grouped GEMM (--moe-grouped-gemm: one cuBLAS GEMM per local expert over several streams)
# reaches 2,672 TFLOP/s on GB200 at K = 7,168, N = 2,048 with L2 flushed (NVIDIA/Megatron-LM
# docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md, Sec. 1 item 3, @eb0783b6).
# The page gives no M or group count: taken as its own baseline's (DeepSeek-V3 at EP 32, micro-batch 1, 4,096
# tokens: 8 local experts of 4,096 tokens each), where gb200's fp8 curve (fitplan.presets.gpus CURVES: 0.677 of
# 5 PFLOP/s, t0 6.38 us, W 5.75 TB/s) gives 3,311 TFLOP/s. Their ratio scales the ceiling of the local experts'
# grouped GEMMs under MXFP8 on every Blackwell die (GB200's the only measurement; tests/unit check the ratio).
GROUPED_MXFP8_FLOPS_PER_S = 2672e12
GROUPED_MXFP8_SHAPE = dict(g=8, m=4096, n=2048, k=7168)
GROUPED_MXFP8_CURVE_FLOPS_PER_S = 3311e12
GROUPED_MXFP8_SCALE = GROUPED_MXFP8_FLOPS_PER_S / GROUPED_MXFP8_CURVE_FLOPS_PER_S
GROUPED_MXFP8_ARCHITECTURES = ("blackwell", "blackwell-ultra")


GROUPED = Cite("megatron-gb200", "Sec. 1 item 3: MXFP8 grouped GEMM, 2,672 TFLOP/s at K=7168, N=2048 on GB200")


@formula("ratio/gemm_ceiling_grouped", "eff_max*scale", GROUPED, RATIO,
         ("the local experts' MXFP8 grouped GEMMs on Blackwell at the measured grouped rate over what the fp8 curve "
          "gives its shape (8 experts x 4,096 tokens assumed: the page's EP 32 DeepSeek-V3 baseline)",))
def grouped_mxfp8_ceiling(*, eff_max, scale):
    return eff_max * scale


# A causal mask: a flash kernel skips the blocks above the diagonal, about half the s^2 FLOPs the attention
# core counts (FlashAttention-2, Dao 2023, Sec. 3.1.1; the benchmarks count causal FLOPs at half)
CAUSAL_FRACTION = 0.5


@formula("ratio/flash_core_efficiency", "eta*clock/causal  (of the counted, full-mask FLOPs)",
         Cite("fitplan", "docs/calibration.md#attention (the kernels' published benchmarks, fitted end to end)"),
         RATIO, ("a causal flash kernel executes about half the counted s^2 FLOPs, at eta of the bf16 peak",))
def flash_core_efficiency(*, eta, clock, causal=CAUSAL_FRACTION):
    return eta * clock / causal


def operand_bandwidth(gpu):
    """W: the GPU's fitted GEMM operand bandwidth, else its HBM bandwidth, else none."""
    return gpu.gemm_bandwidth_bytes_per_s if gpu.gemm_bandwidth_bytes_per_s is not None else gpu.hbm_bytes_per_s


def class_flops_and_s(ev, gemms, rate: Rate, gpu, *, prefix: str = "", grouped: Rate = None):
    """Sum F and sum T over GEMMs, each T = F/(peak*eff) at the GEMM's own efficiency; grouped: the rate of
    the local experts' grouped GEMMs where it differs from the other linears'."""
    F_sum = T_sum = 0
    W = operand_bandwidth(gpu)
    for gm in gemms:
        rt = grouped if grouped is not None and gm.name.startswith("experts_") else rate
        eff = ev(gemm_efficiency, key=f"ratio/gemm/{prefix}{gm.name}", m=gm.m, n=gm.n, k=gm.k, g=gm.g,
                 eff_max=rt.eff_max, peak=rt.peak, t0=gpu.gemm_overhead_s, W=W, e_in=rt.e_in)
        F_sum = F_sum + gm.flops
        T_sum = T_sum + gm.flops / (rt.peak * eff)
    return F_sum, T_sum


def bf16_layers_on_stage(model, c, i, *, first: int, last: int) -> dict:
    """Pipeline rank i's layers among the model's first `first` and last `last`, which keep their GEMMs in bf16
    (--bf16-first-layers, --bf16-last-layers: Megatron-Core runs a layer outside the fp8/fp4 autocast when
    first_last_layers_bf16 holds and its number is below num_layers_at_start_in_bf16 or in the last
    num_layers_at_end_in_bf16, megatron/core/fp8_utils.py is_first_last_bf16_layer, fp4_utils.py get_fp4_context),
    by class as the step times them: a hybrid model's kinds (M, *, -, E), else dense and moe (an MoE model's
    first_dense_layers are its dense ones). Counted like the kinds (fitplan.counts.stages.kind_layers_on_stage),
    both stages' under DualPipe; the multi-token-prediction modules' layers are not among them."""
    from fitplan.counts import stages as ST
    from fitplan.memory.stages import split_kw
    from fitplan.specs.model import LAYER_KINDS
    from fitplan.specs.parallel import Schedule
    kw, v, L = split_kw(model, c), getattr(c, "virtual_stages", 1), model.num_layers
    kept = [j < first or j >= L - last for j in range(L)]
    if model.hybrid:
        classes = {k: [kind == k for kind in model.layer_pattern] for k in LAYER_KINDS}
    else:
        dense = 0 if model.moe is None else model.moe.first_dense_layers
        classes = {"dense": [model.moe is None or j < dense for j in range(L)]}
        if model.moe is not None:
            classes["moe"] = [j >= dense for j in range(L)]
    ranks = [i] if getattr(c, "schedule", None) != Schedule.DUALPIPE else [i, c.pp - 1 - i]
    out = {}
    for name, member in classes.items():
        cum, n = [0], 0
        for j in range(L):
            n += kept[j] and member[j]
            cum.append(n)
        out[name] = sum(ST.kind_layers_on_stage(cum=tuple(cum), v=v, i=r, **kw) for r in ranks)
    return out


@formula("layer/bf16_kept", "n  (the stage's layers among the model's first and last kept in bf16, this class's)",
         Cite("megatron", "megatron/core/fp8_utils.py is_first_last_bf16_layer, fp4_utils.py get_fp4_context "
                          "(first_last_layers_bf16) @d98e8a6"), COUNT,
         ("a layer kept in bf16 runs its linear GEMMs at the bf16 rate; the quantized weight copies and casts are "
          "still counted for every layer (an overcount of those small terms), and the multi-token-prediction "
          "modules keep the recipe's precision",))
def bf16_kept_layers(*, n):
    return n


def _linear_mix(ev, weights, L, sums, gemm_kinds, names, r, gpu, kept):
    """The stage's linear GEMMs' FLOPs and seconds per layer: each class's (sums: (F, T) at the recipe's rate) times
    its layers (weights), over the L layers; the layers kept in bf16 (kept, by class name) at the bf16 rate."""
    F_parts, T_parts = [x[0] for x in sums], [x[1] for x in sums]
    if kept is not None:
        names = names[:len(gemm_kinds)]
        n_kept = [ev(bf16_kept_layers, key=f"layer/bf16_kept/{name}", n=kept[name]) for name in names]
        at_bf16 = [class_flops_and_s(ev, g, r["bf16"], gpu, prefix=f"bf16/{name}/")
                   for g, name in zip(gemm_kinds, names)]
        weights = [w - n for w, n in zip(weights, n_kept)] + n_kept
        F_parts, T_parts = F_parts + [x[0] for x in at_bf16], T_parts + [x[1] for x in at_bf16]
        # a stage without layers (--first-stage-layers 0) takes the first class's rates, which no layer multiplies
        return (select(L > 0, E.mix_kinds(weights, L, F_parts), F_parts[0]),
                select(L > 0, E.mix_kinds(weights, L, T_parts), T_parts[0]))
    return E.mix_kinds(weights, L, F_parts), E.mix_kinds(weights, L, T_parts)


def layer_rates(ev, setup, c, *, L, n_dense, m, e2e, kinds=None, kept=None) -> LayerRates:
    """The stage's GEMM efficiencies at the candidate's degrees (tp, cp, ep, micro-batch), and
    its memory-bound seconds per layer. c: a ParallelConfig or the search's grid; L and
    n_dense: the layers (and dense layers) one micro-batch crosses; m: micro-batches per step; e2e: the
    end-to-end constants (fitplan.timing.calibration.EndToEnd); kept: of those layers, the ones a low-precision
    recipe keeps in bf16, by class (bf16_layers_on_stage), or None."""
    from dataclasses import fields

    from fitplan.memory.breakdown import Shapes
    sh = Shapes.of(setup)
    # the GEMMs' efficiencies: no recompute mode changes them (the elementwise rerun below is the mode's), so the
    # search's screens of one SP setting form them once per slowest rank
    effs, gemm_kinds, casts = once(
        ev, lambda: _gemm_efficiencies(ev, setup, c, sh, L=L, n_dense=n_dense, e2e=e2e, kinds=kinds, kept=kept),
        lambda: layout_inputs("gemm_efficiencies", setup, c, L, n_dense, *(getattr(e2e, f.name) for f in fields(e2e)),
                              *(x for d in (kinds or {}, kept or {}) for item in d.items() for x in item)))
    mem, rerun = E.layer_elementwise(ev, setup, c, sh, L=L, n_dense=n_dense, kappa=e2e.elementwise,
                                     kappa_moe=e2e.moe_traffic, kinds=kinds)
    cast_f, cast_b = E.fp8_casts(ev, setup, sh, gemm_kinds, L=L, n_dense=n_dense, m=m, like=c.micro_batch,
                                 weights=None if casts is None else casts[1])
    eff_lin, eff_core, eff_head, peak_lin, peak_bf16, eff_ssm = effs
    return LayerRates(eff_lin, eff_core, eff_head, peak_lin, peak_bf16, mem, rerun, cast_f, cast_b, eff_ssm)


def _gemm_efficiencies(ev, setup, c, sh, *, L, n_dense, e2e, kinds, kept) -> tuple:
    """layer_rates' GEMM part: ((linear, core, head efficiencies, the linear and bf16 peaks, the SSD scan's
    efficiency), the linear GEMMs by class, the hybrid's (classes, weights) or None)."""
    model, gpu, training = setup.model, setup.cluster.gpu, setup.training
    r = rates(ev, gpu, h=sh.h, compute=training.recipe.compute, clock=e2e.clock)
    T = c.micro_batch * sh.s / c.cp
    eff_ssm = 1
    if kinds is not None:   # a hybrid stage: each kind's GEMMs, weighted by its layers
        used = sorted(set(model.layer_pattern) | set(model.mtp_pattern or ""), key="M*-E".index)
        gemm_kinds = [block_gemms(model, k, T=T, t=c.tp, ep=c.ep, rho=1 if sh.moe is None else sh.moe.rho)
                      for k in used]
        sums = [class_flops_and_s(ev, g, r["linear"], gpu, prefix=f"{k}/", grouped=r.get("grouped"))
                for g, k in zip(gemm_kinds, used)]
        weights = [kinds[k] for k in used]
        F_lin, T_lin = _linear_mix(ev, weights, L, sums, gemm_kinds, used, r, gpu, kept)
        if "M" in used and model.mamba.version.value == "mamba2":
            F_s, T_s = class_flops_and_s(ev, ssd_gemms(model, b=c.micro_batch, s=sh.s, t=c.tp, c=c.cp), r["bf16"],
                                         gpu)
            eff_ssm = ev(sustained_efficiency, key="ratio/ssd_efficiency", F=F_s, T=T_s, peak=r["bf16"].peak)
        casts = (gemm_kinds, weights)
    else:
        gemm_kinds = [linear_gemms(model, T=T, t=c.tp)]
        if n_dense is not None:
            gemm_kinds.append(linear_gemms(model, T=T, t=c.tp, ep=c.ep, moe_layer=True, rho=sh.moe.rho))
        sums = [class_flops_and_s(ev, g, r["linear"], gpu, prefix=prefix, grouped=r.get("grouped"))
                for g, prefix in zip(gemm_kinds, ("", "moe/"))]
        if kept is not None:
            weights = [L] if n_dense is None else [n_dense, L - n_dense]
            F_lin, T_lin = _linear_mix(ev, weights, L, sums, gemm_kinds, ("dense", "moe"), r, gpu, kept)
        else:
            F_lin, T_lin = (sums[0] if n_dense is None else
                            (E.mix(n_dense, L, sums[0][0], sums[1][0]), E.mix(n_dense, L, sums[0][1], sums[1][1])))
        casts = None
    eff_lin = ev(sustained_efficiency, key="ratio/linear_efficiency", F=F_lin, T=T_lin, peak=r["linear"].peak)
    if sh.kernel == "flash":
        eff_core = ev(flash_core_efficiency, key="ratio/core_efficiency", eta=e2e.attention, clock=e2e.clock)
    else:
        F_c, T_c = class_flops_and_s(ev, core_gemms(model, b=c.micro_batch, s=sh.s, t=c.tp, c=c.cp), r["bf16"], gpu)
        eff_core = ev(sustained_efficiency, key="ratio/core_efficiency", F=F_c, T=T_c, peak=r["bf16"].peak)
    F_h, T_h = class_flops_and_s(ev, head_gemms(model, T=T, t=c.tp), r["bf16"], gpu)
    eff_head = ev(sustained_efficiency, key="ratio/head_efficiency", F=F_h, T=T_h, peak=r["bf16"].peak)
    return (eff_lin, eff_core, eff_head, r["linear"].peak, r["bf16"].peak, eff_ssm), gemm_kinds, casts
