"""What one micro-batch computes on a pipeline stage: FLOPs by class, recompute, the pacing rank.

step_flops lists the forward and backward FLOPs of B sequences through L layers and the output layer
(fitplan.counts.flops), split into the classes the time model rates differently (the layers'
linear GEMMs, the attention core, the logits) and what a recompute reruns of each.
"""
from fitplan.arith import maximum, minimum, select
from fitplan.counts import flops as F
from fitplan.counts import params as P
from fitplan.explain import RAW, formula
from fitplan.memory import finetune as FT
from fitplan.memory.shapes import Setup, Shapes
from fitplan.memory.stages import candidate_stages
from fitplan.sources import Cite
from fitplan.specs.parallel import Recompute

def step_flops(ev, setup: Setup, prefix: str, *, B, L, recompute, n_dense=None, rho=1, head=1, frac=1,
               mtp=0, kinds=None) -> dict:
    """Forward, backward (with recompute) FLOPs of B sequences through L layers and the
    logits, keyed "core", "forward", "backward"; each Term under prefix. MoE models: n_dense
    of the L layers are dense; the linear FLOPs are the layers' average, with the routed
    experts' share scaled by rho (the busiest rank's load) when the caller times a stage.
    Hybrid models: kinds, the L layers by kind (M, *, -, E); the linear FLOPs, the attention
    core and the Mamba-2 scans ("ssm") are each the L layers' average."""
    model, sh = setup.model, Shapes.of(setup)
    lora = FT.is_lora(setup.training)
    ssm = None
    ssd_rerun = 0
    if model.hybrid:
        lin, core, ssm, ssd_rerun = _hybrid_layer_flops(ev, setup, prefix, B=B, L=L, kinds=kinds, rho=rho)
    elif lora:   # the frozen matrices and the rank-r adapters beside them (fitplan.memory.finetune)
        base_lin = ev(F.matmul_flops, key=f"{prefix}/layer_frozen_linear", B=B, s=sh.s, P=FT.linear_params(model))
        lin = base_lin + ev(F.matmul_flops, key=f"{prefix}/layer_adapters", B=B, s=sh.s,
                            P=setup.training.lora_rank * FT.adapter_dims(model, setup.training)[0])
    elif model.moe is None:
        lin = ev(F.matmul_flops, key=f"{prefix}/layer_linear", B=B, s=sh.s,
                 P=P.layer_matmul_params(model, moe_layer=False))
    else:
        dense = ev(F.matmul_flops, key=f"{prefix}/dense_layer_linear", B=B, s=sh.s,
                   P=P.layer_matmul_params(model, moe_layer=False))
        moe = ev(F.matmul_flops, key=f"{prefix}/moe_layer_linear", B=B, s=sh.s,
                 P=P.layer_matmul_params(model, moe_layer=True, rho=rho))
        lin = ev(average_layer_flops, key=f"{prefix}/layer_linear", F_dense=dense, F_moe=moe, n_dense=n_dense, L=L)
    v_heads = model.kv_size if model.mla is not None else None
    if ssm is None:
        core = ev(F.attention_core_flops, key=f"{prefix}/attention_core", B=B, s=sh.s, q=sh.q,
                  **({} if v_heads is None else {"v": v_heads}))
    logits = ev(F.logits_flops, key=f"{prefix}/logits", B=B, s=sh.s, h=sh.h, V=model.vocab_size) * head
    if model.mtp_depth:   # each MTP module: its own logits and its 2h -> h projection (DeepSeek-V3 Sec. 2.2)
        logits = logits + mtp * head * (
            ev(F.logits_flops, key=f"{prefix}/mtp_logits", B=B, s=sh.s, h=sh.h, V=model.vocab_size)
            + ev(F.matmul_flops, key=f"{prefix}/mtp_projection", B=B, s=sh.s, P=2 * sh.h * sh.h))
    with_ssm = {} if ssm is None else {"F_ssm": ssm}
    fwd = ev(F.forward_flops, key=f"{prefix}/forward", L=L, F_linear=lin, F_core=core, F_logits=logits, **with_ssm)
    extra = dict(with_ssm) if recompute == Recompute.FULL else {}
    if recompute in (Recompute.OP, Recompute.NORMS):
        extra["F_rerun"] = ev(F.matmul_flops, key=f"{prefix}/rerun_linear", B=B, s=sh.s,
                              P=P.rerun_matmul_params(model, recompute))
    if recompute == Recompute.FULL and not (isinstance(frac, (int, float)) and frac == 1):
        extra["frac"] = frac
    rec = ev(F.recompute_flops, key=f"{prefix}/recompute", L=L, F_linear=lin, F_core=core, recompute=recompute,
             **extra)
    # what the recompute reruns, by class: the layers' linears, or their attention core
    rerun_linear = {Recompute.FULL: frac * L * lin, Recompute.OP: L * extra.get("F_rerun", 0),
                    Recompute.NORMS: L * extra.get("F_rerun", 0)}.get(recompute, 0 * lin)
    rerun_core = {Recompute.FULL: frac * L * core, Recompute.SELECTIVE: L * core}.get(recompute, 0 * core)
    ssm_of = {} if ssm is None else {"ssm": ssm, "rerun_ssm": (frac * L * ssm if recompute == Recompute.FULL
                                                               else 0 * ssm) + L * ssd_rerun}
    if ssm is not None:   # the fused scan's own reruns in backward, whatever the recompute mode
        rec = rec + L * ssd_rerun
    if lora:   # no weight gradients for the frozen matrices and the head: their backward is the input gradient
        frozen = ev(F.frozen_weight_grad_flops, key=f"{prefix}/frozen_weight_grads", L=L, F_frozen=base_lin,
                    F_logits=logits)
        bwd = ev(F.backward_flops, key=f"{prefix}/backward", F_forward=fwd, F_recompute=rec, F_frozen=frozen)
        return {"core": core, "forward": fwd, "backward": bwd, "linear": L * lin, "logits": logits,
                "rerun_linear": rerun_linear, "rerun_core": rerun_core, "recompute": rec,
                "frozen_linear": L * base_lin, "frozen_head": logits,
                "model": ev(F.hardware_flops, key=f"{prefix}/model_lora", F_forward=fwd,
                            F_backward=ev(F.backward_flops, key=f"{prefix}/backward_no_recompute", F_forward=fwd,
                                          F_recompute=0, F_frozen=frozen))}
    bwd = ev(F.backward_flops, key=f"{prefix}/backward", F_forward=fwd, F_recompute=rec)
    return {"core": core, "forward": fwd, "backward": bwd, "linear": L * lin, "logits": logits,
            "rerun_linear": rerun_linear, "rerun_core": rerun_core, "recompute": rec, **ssm_of}


@formula("flops/average_hybrid_layer", "(n_M*F_M + n_A*F_A + n_D*F_D + n_E*F_E)/L",
         Cite("fitplan", "formulas.md#hybrid-models"), "flops")
def average_hybrid_flops(*, n_M=0, F_M=0, n_A=0, F_A=0, n_D=0, F_D=0, n_E=0, F_E=0, L):
    """A hybrid stage's average layer: each kind's FLOPs times its layers, over the L layers
    (an empty stage, the embedding alone, averages to 0)."""
    return (n_M * F_M + n_A * F_A + n_D * F_D + n_E * F_E) / maximum(L, 1)


def _hybrid_layer_flops(ev, setup: Setup, prefix: str, *, B, L, kinds: dict, rho=1):
    """A hybrid stage's (linear, attention core, Mamba-2 scan) forward FLOPs per layer, the
    L layers' averages: each kind's weight matrices (fitplan.counts.hybrid.block_matmul_params),
    the attention layers' core, the Mamba layers' chunked scan (fitplan.counts.flops.ssd_flops)."""
    from fitplan.counts import hybrid as HY
    model, sh = setup.model, Shapes.of(setup)
    used = set(model.layer_pattern) | set(model.mtp_pattern or "")
    lin, core, ssm = {}, {}, {}
    for k in sorted(used, key="M*-E".index):
        tag, name = HY.KIND_TAGS[k], HY.KIND_NAMES[k]
        lin[f"n_{tag}"], lin[f"F_{tag}"] = kinds[k], ev(F.matmul_flops, key=f"{prefix}/{name}_layer_linear", B=B,
                                                         s=sh.s, P=HY.block_matmul_params(model, k, rho=rho))
    F_lin = ev(average_hybrid_flops, key=f"{prefix}/layer_linear", L=L, **lin)
    if "*" in used:
        core = dict(n_A=kinds["*"], F_A=ev(F.attention_core_flops, key=f"{prefix}/attention_core_per_layer", B=B,
                                           s=sh.s, q=sh.q))
    F_core = ev(average_hybrid_flops, key=f"{prefix}/attention_core", L=L, **core)
    m = model.mamba
    if "M" in used and m.version.value == "mamba2":
        ssm = dict(n_M=kinds["M"], F_M=ev(F.ssd_flops, key=f"{prefix}/ssd_scan_per_layer", B=B, s=sh.s,
                                          Q=m.chunk_size, N=m.state_size, G=m.num_groups, d=m.d_inner))
    F_ssm = ev(average_hybrid_flops, key=f"{prefix}/ssd_scan", L=L, **ssm)
    rerun = {}
    if ssm:
        rerun = dict(n_M=kinds["M"], F_M=ev(F.ssd_backward_rerun_flops, key=f"{prefix}/ssd_backward_rerun_per_layer",
                                            B=B, s=sh.s, Q=m.chunk_size, N=m.state_size, G=m.num_groups,
                                            d=m.d_inner))
    F_rerun = ev(average_hybrid_flops, key=f"{prefix}/ssd_backward_rerun", L=L, **rerun)
    return F_lin, F_core, F_ssm, F_rerun


@formula("flops/average_layer_linear", "(n_dense*F_dense + (L - n_dense)*F_moe)/L",
         Cite("fitplan", "formulas.md#moe"), "flops")
def average_layer_flops(*, F_dense, F_moe, n_dense, L):
    return (n_dense * F_dense + (L - n_dense) * F_moe) / maximum(L, 1)


@formula("flops/recomputed_share", "min(N, l)/l  (block: the first N of the stage's l layers)",
         Cite("megatron", "--recompute-method block --recompute-num-layers N"), "ratio")
def recomputed_share(*, N, l):
    return minimum(N, l) / maximum(l, 1)


def recomputed_share_of(ev, c, l):
    """The share of a stage's layers full recompute reruns: all, or --recompute-method block's N.
    l: the stage's layers, or a function giving them (called only for block recompute)."""
    if c.recompute != Recompute.FULL or c.recompute_num_layers is None or str(c.recompute_method) != "block":
        return 1
    return ev(recomputed_share, N=c.recompute_num_layers, l=l() if callable(l) else l)


def pacing_rank(setup: Setup, c):
    """The pipeline rank whose micro-batch takes longest: of the candidate ranks
    (fitplan.memory.stages.candidate_ranks), the one with the most forward FLOPs; the later
    rank among equals (the output layer's sends come last)."""
    best_i, best_f = None, None
    for st in candidate_stages(setup.model, c):
        i = st.index
        f = step_flops(RAW, setup, "", B=1, L=st.layers, recompute=c.recompute, n_dense=st.n_dense,
                       head=select(st.head, 1, 0), mtp=st.mtp, kinds=st.kinds())["forward"]
        if best_i is None:
            best_i, best_f = i, f
        else:
            later = f >= best_f
            best_i, best_f = select(later, i, best_i), maximum(f, best_f)
    return best_i
