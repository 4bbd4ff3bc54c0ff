"""A stage's stored activations: its layers' (Korthikanti Sec. 4.2.3), the other micro-batches in
flight, and Megatron-LM's partial full recompute (--recompute-num-layers, uniform or block), each
formula for ints and arrays."""
from fitplan.arith import ceil_div, maximum, minimum
from fitplan.explain import formula
from fitplan.memory import activations as A
from fitplan.memory.shapes import Setup, Shapes
from fitplan.sources import Cite
from fitplan.specs.parallel import Recompute

STAGE = Cite("korthikanti", "Sec. 4.2.3")


def _stage_layers_text(*, n_dense=None, **_):
    return ("A_layer*l  (one micro-batch through this stage's l layers)" if n_dense is None else
            "n_dense*A_layer + (l - n_dense)*A_moe  (one micro-batch through this stage's l layers)")


@formula("activations/layers", _stage_layers_text, STAGE)
def stage_layers_bytes(*, A_layer, l, n_dense=None, A_moe=0):
    n_d = l if n_dense is None else n_dense
    return A_layer * n_d + A_moe * (l - n_d)


@formula("activations/pipeline_in_flight", "A_stage*(chunks - v)/v  (the other micro-batches in flight)", STAGE)
def in_flight_bytes(*, A_stage, v, chunks):
    """chunks model chunks of l/v layers each are held; one micro-batch's worth, v of
    them, is counted in activations/layers."""
    return ceil_div(A_stage * (chunks - v), v)


@formula("activations/layers",
         lambda *, method, **_: "min(N, l)*A_input + (l - min(N, l))*A_keep_stage/l  (block: the first N layers "
                                "recomputed)" if method == "block" else
         "ceil(l/N)*A_input  (uniform: each group of N layers keeps its input)",
         Cite("megatron", "--recompute-method uniform|block --recompute-num-layers N (transformer_block.py "
                          "_checkpointed_forward)"))
def partial_recompute_stage_bytes(*, A_input, A_keep_stage, l, N, method):
    """Full recompute of part of a stage [Megatron-LM --recompute-granularity full]. block:
    the first N layers of the stage keep only their input, the rest everything (A_keep_stage:
    the stage's bytes without recompute; its mean per layer for the kept ones). uniform:
    every layer is recomputed, in groups of N layers that each keep their first input."""
    if method == "block":
        n = minimum(N, l)
        return n * A_input + ceil_div((l - n) * A_keep_stage, maximum(l, 1))
    return ceil_div(l, N) * A_input


@formula("activations/recompute_workspace",
         lambda *, method, **_: "A_keep_layer  (one layer recomputed at a time)" if method == "block" else
         "min(N, l)*A_keep_layer  (a group of N layers recomputed at once)",
         Cite("megatron", "transformer_block.py _checkpointed_forward"))
def partial_recompute_workspace_bytes(*, A_keep_layer, l, N, method):
    return A_keep_layer if method == "block" else minimum(N, l) * A_keep_layer


def partial_full(ev, setup: Setup, c, *, layer, l, n_dense, a_input, per_layer=A.per_layer_bytes):
    """Megatron's --recompute-num-layers with --recompute-method: the stage's stored bytes and
    the workspace, from the layers' bytes without recompute (a_input: a layer's input)."""
    keep = dict(layer, recompute=Recompute.NONE)
    a_keep = ev(per_layer, key="activations/per_layer_kept", **keep)
    if setup.model.moe is None:
        stage_keep = ev(stage_layers_bytes, key="activations/layers_kept", A_layer=a_keep, l=l)
        widest = a_keep
    else:
        a_keep_moe = ev(A.per_layer_bytes, key="activations/per_moe_layer_kept", **keep, **Shapes.of(setup).moe.kw())
        stage_keep = ev(stage_layers_bytes, key="activations/layers_kept", A_layer=a_keep, l=l, n_dense=n_dense,
                        A_moe=a_keep_moe)
        widest = maximum(a_keep, a_keep_moe)
    method, N = str(c.recompute_method), c.recompute_num_layers
    return (ev(partial_recompute_stage_bytes, A_input=a_input, A_keep_stage=stage_keep, l=l, N=N, method=method),
            ev(partial_recompute_workspace_bytes, A_keep_layer=widest, l=l, N=N, method=method))
