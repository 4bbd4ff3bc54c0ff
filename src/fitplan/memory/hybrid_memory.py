"""A hybrid (Mamba) model's stage, kind by kind: each kind of block's stored bytes behind its
pre-norm (fitplan.memory.activations), the stage's layers weighted by their kinds, a Mamba layer's
per-token symbols, and the FSDP unit a hybrid layer gathers (docs/formulas.md#hybrid-models)."""
from fitplan.arith import ceil_div, maximum, select
from fitplan.counts import params as P
from fitplan.explain import RAW
from fitplan.memory import activations as A
from fitplan.memory.shapes import Setup, Shapes
from fitplan.memory.stages import Stage
from fitplan.specs import ModelSpec
from fitplan.specs.model import LAYER_KINDS
from fitplan.specs.parallel import Recompute

def hybrid_block_bytes(ev, setup: Setup, layer: dict, suffix: str = "") -> dict:
    """One layer's stored bytes for each kind of a hybrid model (activations.per_block_bytes;
    0 for the kinds it does not have). layer: the per-layer keywords (Shapes.kw with b, t, c,
    sp, recompute)."""
    from fitplan.counts import hybrid as HY
    model, sh = setup.model, Shapes.of(setup)
    used = set(model.layer_pattern) | set(model.mtp_pattern or "")
    base = {k: layer[k] for k in ("s", "b", "h", "e", "M", "D", "t", "c", "sp", "recompute")}
    if sh.e_l is not None:
        base["e_l"] = sh.e_l
    out = {}
    for kind in LAYER_KINDS:
        if kind not in used:
            out[kind] = 0 * layer["b"]
            continue
        kw = dict(base, kind=kind)
        if kind == "*":
            kw.update(q=sh.q, kv=sh.kv, a=sh.a, **({} if sh.kernel == "eager" else {"kernel": sh.kernel}))
        elif kind == "M":
            kw["T_tok"] = ev(A.mamba_per_token_bytes, **mamba_token_kw(model, sh))
        else:
            kw["T_tok"] = A.mlp_per_token_bytes(h=sh.h, f=sh.f, n=sh.n, e=sh.e, e_l=sh.e_l,
                                                **(sh.moe.kw() if kind == "E" else {}))
        out[kind] = ev(A.per_block_bytes, key=f"activations/per_{HY.KIND_NAMES[kind]}_layer{suffix}", **kw)
    return out


def hybrid_activations(ev, setup: Setup, c, *, stage: Stage, layer: dict):
    """A hybrid stage's activations: (the stage's layers for one micro-batch, the recompute
    workspace, the MoE all-to-all buffers, the widest layer's bytes). Each kind's block
    (activations.per_block_bytes) times its count on the stage; the workspace is the largest
    kind's (a recomputed block's activations, or an attention core under selective), a Mamba
    layer's adding its scan's transient chunk states (activations.ssd_scan_workspace_bytes)."""
    from fitplan.counts import hybrid as HY
    model, sh = setup.model, Shapes.of(setup)
    kinds = stage.kinds()
    used = set(model.layer_pattern) | set(model.mtp_pattern or "")
    bytes_of = hybrid_block_bytes(ev, setup, layer)
    if c.recompute == Recompute.FULL:   # the whole block, re-created while its backward runs
        extra_of = hybrid_block_bytes(ev, setup, dict(layer, recompute=Recompute.NONE), "_kept")
    elif c.recompute == Recompute.SELECTIVE:   # the attention core it dropped
        kept = hybrid_block_bytes(RAW, setup, dict(layer, recompute=Recompute.NONE))
        extra_of = {k: kept[k] - bytes_of[k] for k in LAYER_KINDS}
    else:
        extra_of = {k: 0 * layer["b"] for k in LAYER_KINDS}
    a_stage = ev(A.hybrid_stage_bytes, **{f"n_{HY.KIND_TAGS[k]}": n for k, n in kinds.items()},
                 **{f"A_{HY.KIND_TAGS[k]}": bytes_of[k] for k in LAYER_KINDS})
    workspace = widest = 0 * layer["b"]
    for kind in sorted(used, key=LAYER_KINDS.index):
        extra = extra_of[kind]
        if kind == "M" and model.mamba.version.value == "mamba2":   # the scan's chunk states, in forward and backward
            m = model.mamba
            extra = extra + ev(A.ssd_scan_workspace_bytes, b=layer["b"], s=sh.s, Q=m.chunk_size, H=m.num_heads,
                               P=m.head_dim, N=m.state_size, G=m.num_groups, t=layer["t"], c=layer["c"])
        workspace = maximum(workspace, extra)
        widest = maximum(widest, bytes_of[kind])
    if "E" in used:
        mk = sh.moe
        buffers = ev(A.moe_buffers_bytes, s=sh.s, b=layer["b"], h=mk.w or sh.h, e=sh.e, k=mk.k, rho=mk.rho,
                     t=layer["t"], c=layer["c"], **({} if sh.e_l is None else {"e_l": sh.e_l})) * select(
            kinds["E"] > 0, 1, 0)
    else:
        buffers = 0 * layer["b"]
    return a_stage, workspace, buffers, widest


def mamba_token_kw(model: ModelSpec, sh: "Shapes") -> dict:
    """The keywords of activations.mamba_per_token_bytes for the model's Mamba layers."""
    from fitplan.counts import hybrid as HY
    m = model.mamba
    kw = dict(W_in=HY.in_proj_width(model), d=m.d_inner, G=m.num_groups, N=m.state_size, e=sh.e)
    if sh.e_l is not None:
        kw["e_l"] = sh.e_l
    if m.version.value == "mamba1":
        kw.update(version="mamba1", R=HY.dt_rank(model), s=sh.s)
    return kw


def hybrid_fsdp_unit(ev, model: ModelSpec, c, w_kw: dict):
    """The largest layer FSDP gathers at once in a hybrid model: each kind's block (its split and
    replicated parameters, an MoE block with its E/ep experts)."""
    from fitplan.counts import hybrid as HY
    unit = 0 * c.tp
    for kind in sorted(set(model.layer_pattern) | set(model.mtp_pattern or ""), key=LAYER_KINDS.index):
        S, R = HY.block_params(model, kind)
        this = ev(P.stage_params, key=f"params/fsdp_{HY.KIND_NAMES[kind]}_layer_unit", l=1, emb=False, out=False,
                  **dict(w_kw, S=S, R=R))
        if kind == "E":
            this = this + ceil_div(P.expert_params(model), c.ep)
        unit = maximum(unit, this)
    return unit
