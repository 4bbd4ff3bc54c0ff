"""A stage's sustained GEMM rates and memory-bound seconds per layer, for fitplan.timing.step.

The step takes the layer's linears, its attention core and the output layer (fitplan.timing.layer_gemms)
each at their sustained efficiency on the GEMM curve (fitplan.timing.gemm), the FLOP-weighted harmonic mean
of their GEMMs'; a low-precision recipe's layers kept in bf16 run their linears at the bf16 rate. The
memory-bound kernels and fp8 casts come from fitplan.timing.elementwise.
"""
from fitplan.arith import select
from fitplan.explain import COUNT, formula, layout_inputs, once
from fitplan.record import record
from fitplan.sources import Cite
from fitplan.timing import calibration as CAL
from fitplan.timing import elementwise as E
from fitplan.timing.gemm import (class_flops_and_s, flash_core_efficiency, fp8_attention_speedup, head_dim_factor, rates,
                                 sustained_efficiency)
from fitplan.timing.layer_gemms import block_gemms, core_gemms, head_gemms, linear_gemms, ssd_gemms


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
         ("a layer kept in bf16 runs its linear GEMMs at the bf16 rate and casts nothing (it runs outside the "
          "autocast); its quantized weight copies are still counted in memory (an overcount of that small term), and "
          "the multi-token-prediction modules keep the recipe's precision",))
def bf16_kept_layers(*, n):
    return n


def _linear_mix(ev, weights, L, sums, gemm_kinds, names, r, gpu, kept):
    """The stage's linear GEMMs' FLOPs and seconds per layer: each class's (sums: (F, T) at the recipe's rate) times
    its layers (weights), over the L layers; the layers kept in bf16 (kept, by class name) at the bf16 rate. Also
    each class's layers inside the low-precision autocast, the ones that cast (all of them without kept)."""
    F_parts, T_parts = [x[0] for x in sums], [x[1] for x in sums]
    if kept is not None:
        names = names[:len(gemm_kinds)]
        n_kept = [ev(bf16_kept_layers, key=f"layer/bf16_kept/{name}", n=kept[name]) for name in names]
        at_bf16 = [class_flops_and_s(ev, g, r["bf16"], gpu, prefix=f"bf16/{name}/")
                   for g, name in zip(gemm_kinds, names)]
        inside = [w - n for w, n in zip(weights, n_kept)]
        weights = inside + n_kept
        F_parts, T_parts = F_parts + [x[0] for x in at_bf16], T_parts + [x[1] for x in at_bf16]
        # a stage without layers (--first-stage-layers 0) takes the first class's rates, which no layer multiplies
        return (select(L > 0, E.mix_kinds(weights, L, F_parts), F_parts[0]),
                select(L > 0, E.mix_kinds(weights, L, T_parts), T_parts[0]), inside)
    return E.mix_kinds(weights, L, F_parts), E.mix_kinds(weights, L, T_parts), weights


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
    # search's screens (one per recompute mode) form them once per slowest rank
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
        F_lin, T_lin, inside = _linear_mix(ev, weights, L, sums, gemm_kinds, used, r, gpu, kept)
        if "M" in used and model.mamba.version.value == "mamba2":
            F_s, T_s = class_flops_and_s(ev, ssd_gemms(model, b=c.micro_batch, s=sh.s, t=c.tp, c=c.cp), r["bf16"],
                                         gpu)
            eff_ssm = ev(sustained_efficiency, key="ratio/ssd_efficiency", F=F_s, T=T_s, peak=r["bf16"].peak)
        casts = (gemm_kinds, inside)   # the casts: each kind's layers inside the low-precision autocast
    else:
        gemm_kinds = [linear_gemms(model, T=T, t=c.tp)]
        if n_dense is not None:
            gemm_kinds.append(linear_gemms(model, T=T, t=c.tp, ep=c.ep, moe_layer=True, rho=sh.moe.rho))
        sums = [class_flops_and_s(ev, g, r["linear"], gpu, prefix=prefix, grouped=r.get("grouped"))
                for g, prefix in zip(gemm_kinds, ("", "moe/"))]
        if kept is not None:
            weights = [L] if n_dense is None else [n_dense, L - n_dense]
            F_lin, T_lin, inside = _linear_mix(ev, weights, L, sums, gemm_kinds, ("dense", "moe"), r, gpu, kept)
            casts = (gemm_kinds, inside)   # the kept layers cast nothing
        else:
            F_lin, T_lin = (sums[0] if n_dense is None else
                            (E.mix(n_dense, L, sums[0][0], sums[1][0]), E.mix(n_dense, L, sums[0][1], sums[1][1])))
            casts = None
    eff_lin = ev(sustained_efficiency, key="ratio/linear_efficiency", F=F_lin, T=T_lin, peak=r["linear"].peak)
    if sh.kernel == "flash":
        d = model.qk_head_dim
        r_core = ev(head_dim_factor, d=d, r_64=e2e.attention_d64)
        q = (None if setup.training.attention_precision == "bf16" else
             CAL.fp8_attention_speedups(gpu.architecture, d, model.mla is not None, setup.training.recipe.compute))
        if q is not None:
            r_core = r_core * ev(fp8_attention_speedup, s=sh.s, seq=CAL.FP8_ATTENTION_SEQ, q=q)
        eff_core = ev(flash_core_efficiency, key="ratio/core_efficiency", eta=e2e.attention, r=r_core, clock=e2e.clock)
    else:
        F_c, T_c = class_flops_and_s(ev, core_gemms(model, b=c.micro_batch, s=sh.s, t=c.tp, c=c.cp), r["bf16"], gpu)
        eff_core = ev(sustained_efficiency, key="ratio/core_efficiency", F=F_c, T=T_c, peak=r["bf16"].peak)
    F_h, T_h = class_flops_and_s(ev, head_gemms(model, T=T, t=c.tp), r["bf16"], gpu)
    eff_head = ev(sustained_efficiency, key="ratio/head_efficiency", F=F_h, T=T_h, peak=r["bf16"].peak)
    return (eff_lin, eff_core, eff_head, r["linear"].peak, r["bf16"].peak, eff_ssm), gemm_kinds, casts
