"""Assemble the per-GPU memory of one pipeline stage: a flat list of formula calls.

This is the only place that knows which terms exist. `stage_memory` runs with any
evaluator (fitplan.explain): RAW over NumPy arrays in the search, a Trace for the one
configuration a report explains. The busiest GPU is the larger of the first stage (the
embedding, the most micro-batches in flight) and the last (the output layer and logits).

The pieces it assembles live by idea beside it: the setup and its shapes (fitplan.memory.shapes),
the pipeline ranks (stages), the weight and gradient copies beyond the sharded states (copies), a
stage's stored activations and partial recompute (stage_activations), hybrid models' layers by kind
(hybrid_memory, loaded for hybrid models only). Setup, Shapes and the stage functions are still importable from here.
"""
from dataclasses import field
from typing import Callable

from fitplan.arith import ceil_div, floor_div, is_array, maximum, minimum, select
from fitplan.counts import params as P
from fitplan.counts import stages as ST
from fitplan.explain import RAW, Term, Trace, formula, layout_inputs, once, untraced
from fitplan.memory import activations as A
from fitplan.memory import finetune as FT
from fitplan.memory import offload as OF
from fitplan.memory import runtime as RT
from fitplan.memory import states as S
from fitplan.memory import timeline as TL
from fitplan.memory.copies import (accumulated_grads_bytes, fp8_cache_factor, fp8_weight_cache_bytes,
                                   gathered_weights_bytes, kept_gathered, optimizer_in_backward_grads_bytes,
                                   paged_resident_bytes, pipelined)
from fitplan.memory.shapes import Setup, Shapes
from fitplan.memory.stage_activations import in_flight_bytes, partial_full, stage_layers_bytes
from fitplan.memory.stages import (Stage, candidate_ranks, candidate_stages, hybrid_layer_kw, shard_group, stage_at,
                                   stage_expert_psi, stage_psi)
from fitplan.parts import ACTIVATIONS, RUNTIME, STATES, part_keys
from fitplan.record import record
from fitplan.sources import Cite
from fitplan.specs import ParallelConfig
from fitplan.specs.parallel import Offload, Recompute

PARTS = part_keys(STATES, ACTIVATIONS, RUNTIME)   # the table of parts, fitplan.parts
STATE_PARTS = part_keys(STATES)
UNBOUNDED_MICROBATCHES = 2**40   # no global batch given: assume enough micro-batches to fill the pipeline


def stage_memory(ev, setup: Setup, c, *, first: bool | None = None, stage: Stage | None = None,
                 comms: dict | None = None) -> dict:
    """Bytes per term on one GPU of a pipeline stage: `stage`, or the first (first=True) or
    last (first=False) one. c: a ParallelConfig, or the search's grid (the same attribute
    names; its degrees, micro-batch, virtual stages and ZeRO stages are broadcast arrays,
    its sequence_parallel, recompute and the SETTINGS scalars). comms: the communicators' terms
    (_communicators) of c already computed for another stage; no stage changes them."""
    from fitplan.specs.parallel import Schedule
    model, training = setup.model, setup.training
    tp, pp, dp, cp, b, v = c.tp, c.pp, c.dp, c.cp, c.micro_batch, c.virtual_stages
    if stage is None:
        stage = stage_at(ev, model, c, 0 * pp if first else pp - 1)
    moe = model.moe
    n_dense = stage.n_dense
    # no recompute mode changes the states or the copies of the weights: the search's screens (one per
    # recompute mode) compute them once
    states, trained, psi = once(ev, lambda: _zero_parts(ev, setup, c, stage=stage),
                                lambda: layout_inputs("states", setup, c, stage))
    out = dict(states)
    lora = FT.is_lora(training)
    sh, sp = Shapes.of(setup), c.sequence_parallel
    per_layer, per_workspace = (FT.lora_layer_bytes, FT.lora_workspace_bytes) if lora else (
        A.per_layer_bytes, A.recompute_workspace_bytes)
    layer = dict(sh.kw(c.recompute), b=b, t=tp, c=cp, sp=sp, recompute=c.recompute, **(FT.lora_kw(setup) if lora else {}))
    m = UNBOUNDED_MICROBATCHES if training.global_batch is None else floor_div(training.global_batch, dp * b)
    a_layer = None if model.hybrid else ev(per_layer, **layer)
    dual = c.schedule == Schedule.DUALPIPE
    v_held = 2 if dual else v
    chunks = ev(A.chunks_in_flight, p=pp, v=v_held, r=stage.index, m=m, schedule=str(c.schedule))
    l = stage.layers
    if model.hybrid:
        from fitplan.memory.hybrid_memory import hybrid_activations   # hybrid models only
        a_stage, workspace, buffers, a_layer = hybrid_activations(ev, setup, c, stage=stage, layer=layer)
    elif moe is None:
        a_stage = ev(stage_layers_bytes, A_layer=a_layer, l=l)
        workspace = ev(per_workspace, **layer)
        buffers = 0
    else:
        mk = sh.moe
        moe_layer = dict(layer, **mk.kw())
        a_moe = ev(A.per_layer_bytes, key="activations/per_moe_layer", **moe_layer)
        a_stage = ev(stage_layers_bytes, A_layer=a_layer, l=l, n_dense=n_dense, A_moe=a_moe)
        workspace = maximum(ev(A.recompute_workspace_bytes, **layer),
                            ev(A.recompute_workspace_bytes, key="activations/recompute_workspace_moe", **moe_layer))
        buffers = ev(A.moe_buffers_bytes, s=sh.s, b=b, h=mk.w or sh.h, e=sh.e, k=mk.k, rho=mk.rho, t=tp, c=cp,
                     **({} if sh.e_l is None else {"e_l": sh.e_l})) * select(l - n_dense > 0, 1, 0)
    if c.recompute == Recompute.FULL and c.recompute_num_layers is not None:
        a_stage, workspace = partial_full(ev, setup, c, layer=layer, l=l, n_dense=n_dense, a_input=a_layer,
                                           per_layer=per_layer)
    out["activations/layers"] = a_stage
    out["activations/pipeline_in_flight"] = ev(in_flight_bytes, A_stage=a_stage, v=v_held, chunks=chunks)
    if OF.offload_of(c).activations:   # stored activations go to host memory; one layer's are on the GPU in transit
        out["host/activations"] = ev(OF.host_activation_bytes, A_stage=a_stage,
                                     A_in_flight=out["activations/pipeline_in_flight"])
        out["activations/layers"] = ev(OF.in_transit_bytes, A_layer=a_layer if moe is None or model.hybrid else
                                       maximum(a_layer, a_moe), A_stage=a_stage)
        out["activations/pipeline_in_flight"] = 0
    frozen = {"ids": 0} if lora else {}   # a frozen embedding and head keep no token ids and no head input
    n_mb = lambda: ev(A.embedding_microbatches, chunks=chunks, v=v_held)
    out["activations/embedding"] = _held(ev, stage.embedding, lambda: ev(
        A.embedding_bytes, s=sh.s, b=b, h=sh.h, M=sh.M, D=sh.D, t=tp, c=cp, sp=sp, n_mb=n_mb(), **frozen))
    n_out = (m if c.schedule == Schedule.GPIPE else 1) * (1 + model.mtp_depth)   # each MTP module has its own loss
    out["activations/output"] = _held(ev, stage.head, lambda: ev(
        A.output_bytes, s=sh.s, b=b, h=sh.h, V=model.vocab_size, e=sh.e, t=tp, c=cp, sp=sp,
        **({} if (not is_array(n_out) and n_out == 1) else {"n_mb": n_out}), **loss_kept(setup, b=b, t=tp, c=cp)))
    out["activations/recompute_workspace"] = workspace
    out["activations/moe_buffers"] = buffers
    out["runtime/dequant_workspace"] = (ev(FT.dequant_workspace_bytes, P_max=FT.largest_linear(model), t=tp)
                                        if lora and FT.base_precision(training) in ("nf4", "int8") else 0)
    # no recompute mode changes the runtime's buffers: the search's screens (one per recompute mode) compute them once
    out.update(once(ev, lambda: _runtime(ev, setup, c, stage=stage, psi=psi, trained=trained, layer=layer,
                                         comms=comms),
                    lambda: layout_inputs("runtime", setup, c, stage)))
    return out


def _zero_parts(ev, setup: Setup, c, *, stage: Stage) -> tuple:
    """(the model states and the weights' extra copies on one GPU of the stage, the trained parameters and their
    sharding, the stage's parameters psi): the parts the ZeRO stage and the layout set."""
    model, training, recipe = setup.model, setup.training, setup.training.recipe
    tp, pp, dp, cp = c.tp, c.pp, c.dp, c.cp
    moe, n_dense = model.moe, stage.n_dense
    psi = stage_psi(ev, model, c, stage=stage)
    n_d = ev(shard_group, dp=dp, c=cp, shard=c.shard_degree) if c.shard_degree is not None else dp * cp
    replicas = floor_div(dp * cp, n_d)
    experts = {} if moe is None else dict(psi_e=stage_expert_psi(ev, model, c, stage=stage),
                                          n_ed=maximum(floor_div(tp * dp * cp, c.ep * replicas), 1))
    zero = c.zero
    lora = FT.is_lora(training)
    frozen = None   # a frozen base's bytes as ZeRO-3 shards and gathers them (fitplan.memory.finetune)
    if lora:   # a frozen base, trained adapters (fitplan.memory.finetune)
        out, trained, frozen = _lora_states(ev, setup, c, stage=stage, psi=psi, n_d=n_d)
    else:
        out = {
            "states/weights": ev(S.weights_bytes, psi=psi, w=recipe.weights_bytes, n_d=n_d, zero=zero, **experts),
            "states/grads": ev(S.grads_bytes, psi=psi, g=recipe.grads_bytes, n_d=n_d, zero=zero, **experts),
            "states/master": ev(S.master_bytes, psi=psi, m=recipe.master_bytes, n_d=n_d, zero=zero, **experts),
            "states/optimizer": ev(S.optimizer_bytes, psi=psi, K=recipe.optimizer_bytes, n_d=n_d, zero=zero,
                                   **experts),
        }
        trained = dict(psi=psi, n_d=n_d, zero=zero, **experts)
    OF.place_states(ev, out, OF.offload_of(c), trained=dict(trained, g_h=OF.gradient_precision(recipe)))
    if training.optimizer_in_backward or training.paged_optimizer:
        P_max = _largest_trained(setup, c, stage=stage, trained=trained)
        if training.optimizer_in_backward:
            out["states/grads"] = ev(optimizer_in_backward_grads_bytes, g=recipe.grads_bytes, P_max=P_max, n_d=n_d,
                                     zero=zero)
        if training.paged_optimizer and not OF.offload_of(c).optimizer:
            resident = ev(paged_resident_bytes, K=recipe.optimizer_bytes, P_max=P_max, n_d=n_d, zero=zero)
            paged = out["states/optimizer"] - resident
            out["host/optimizer"] = ev(OF.moved_bytes, key="host/optimizer",
                                       gpu_bytes=paged if is_array(paged) else int(paged), what="states/optimizer (paged)")
            out["states/optimizer"] = resident
    keep = kept_gathered(c)
    z3 = zero == 3   # a bool, or the search's array over the ZeRO stages
    if (is_array(z3) or z3) and (is_array(keep) or keep):
        out["runtime/gathered_weights"] = select(z3, ev(FT.gathered_frozen_bytes, W_shard=frozen, keep=keep) if lora else ev(
            gathered_weights_bytes, psi=psi, psi_e=experts.get("psi_e", 0), w=recipe.weights_bytes, keep=keep), 0)
    else:
        out["runtime/gathered_weights"] = 0
    if recipe.compute != "bf16" and training.fp8_weight_cache:
        if model.hybrid:
            psi_lin = ev(P.hybrid_layers_params, key="params/stage_linear", t=tp,
                         **hybrid_layer_kw(model, stage, replicated=False))
        else:
            psi_lin = ev(P.stage_params, key="params/stage_linear", l=stage.layers, S=P.layer_sharded_params(model),
                         R=0, Vh=0, P_pos=0, N_f=0, head=0, tied=False, t=tp, p=pp, emb=False, out=False,
                         **({} if moe is None else dict(n_dense=n_dense, S_moe=P.moe_layer_sharded_params(model))))
        out["runtime/fp8_weight_cache"] = ev(
            fp8_weight_cache_bytes, c8=fp8_cache_factor(compute=recipe.compute, weights_bytes=recipe.weights_bytes,
                                                        architecture=setup.cluster.gpu.architecture),
            zero3=1 * z3, psi_lin=psi_lin + experts.get("psi_e", 0), l=stage.layers)
    else:
        out["runtime/fp8_weight_cache"] = 0
    return out, trained, psi


def _runtime(ev, setup: Setup, c, *, stage: Stage, psi, trained: dict, layer: dict,
             comms: dict | None = None) -> dict:
    """The runtime's buffers on one GPU of a stage (fitplan.memory.runtime), and the aux values
    the peak and the timeline read (fitplan.memory.timeline). psi: the stage's parameters (what
    FSDP gathers); trained: the parameters that get gradients and their sharding (the adapters
    under LoRA), which the buckets and the optimizer step hold; layer: the per-layer formulas'
    keywords (its shapes only are read here: no recompute mode changes this)."""
    model, training, cluster, recipe = setup.model, setup.training, setup.cluster, setup.training.recipe
    tp, pp, cp, b, zero = c.tp, c.pp, c.cp, c.micro_batch, c.zero
    sh, moe = Shapes.of(setup), model.moe
    psi_t, n_d = trained["psi"], trained["n_d"]
    psi_e, n_ed = trained.get("psi_e", 0), trained.get("n_ed", 1)
    out = {"runtime/cuda_context": ev(RT.cuda_context_bytes, X_ctx=cluster.cuda_context_bytes),
           "runtime/blas_workspace": ev(RT.blas_workspace_bytes, W_blas=cluster.gpu.blas_workspace_bytes),
           **(_communicators(ev, setup, c) if comms is None else comms),
           "runtime/grad_buckets": ev(RT.grad_buckets_bytes, psi=psi_t + psi_e, g=recipe.grads_bytes, zero=zero,
                                      view=training.grad_bucket_view, bucket=training.grad_bucket_bytes)}
    piped = pipelined(c)
    z2 = zero >= 2
    if (is_array(z2) or z2) and (is_array(piped) or piped):
        out["runtime/accumulated_grads"] = select(z2, ev(accumulated_grads_bytes, psi=psi_t, psi_e=psi_e,
                                                         g=recipe.grads_bytes, n_d=n_d, n_ed=n_ed, pipelined=piped), 0)
    else:
        out["runtime/accumulated_grads"] = 0
    zero3 = zero == 3
    if is_array(zero3) or zero3:
        w_kw = dict(S=P.layer_sharded_params(model), R=P.layer_replicated_params(model), Vh=P.embedding_params(model),
                    P_pos=P.position_params(model), N_f=P.norm_params(model), head=P.head_params(model),
                    tied=model.tied_embeddings, t=tp, p=pp)
        head = ev(P.stage_params, key="params/fsdp_output_unit", l=0, emb=False, out=stage.head, **w_kw)
        if model.hybrid:
            from fitplan.memory.hybrid_memory import hybrid_fsdp_unit
            unit = hybrid_fsdp_unit(ev, model, c, w_kw)
        else:
            unit = ev(P.stage_params, key="params/fsdp_layer_unit", l=1, emb=False, out=False, **w_kw)
        if moe is not None and not model.hybrid:
            unit = maximum(unit, ev(P.stage_params, key="params/fsdp_moe_layer_unit", l=1, emb=False, out=False,
                                    n_dense=0, S_moe=P.moe_layer_sharded_params(model),
                                    R_moe=P.moe_layer_replicated_params(model), **w_kw)
                           + ceil_div(P.expert_params(model), c.ep))
        units = FT.fsdp_units(ev, setup, c, P_layer=unit, P_head=head) if FT.is_lora(training) else RT.fsdp_units(
            ev, w=recipe.weights_bytes, P_layer=unit, P_head=head)
        fsdp = dict(units, w=recipe.weights_bytes, g=recipe.grads_bytes, k=training.fsdp_prefetch,
                    keep=kept_gathered(c), acc=piped)
        out["runtime/fsdp_buffers"] = select(zero3, ev(RT.fsdp_buffers_bytes, **fsdp), 0)
        out[TL.FSDP_LOSS] = select(zero3, ev(RT.fsdp_buffers_bytes, key="runtime/fsdp_buffers_loss", **fsdp,
                                             moment="loss"), 0)
        out[TL.FSDP_FORWARD] = select(zero3, RT.fsdp_buffers_bytes(**fsdp, moment="forward"), 0)
    else:
        out["runtime/fsdp_buffers"] = out[TL.FSDP_FORWARD] = out[TL.FSDP_LOSS] = 0
    grads_kw = {k: layer[k] for k in ("s", "b", "h", "a", "q", "kv", "f", "n", "e", "t", "c", "sp")}
    w_grad = 0 if FT.is_lora(training) else recipe.weights_bytes   # a frozen base gets no weight gradients
    grads_kw.update(kernel=sh.kernel, w=w_grad)
    if model.tied_embeddings:   # both ends on one rank: one parameter, its gradient accumulated across the backward
        grads_kw.update(V=model.vocab_size, tied=stage.embedding * stage.head)
    backward = ev(RT.layer_backward_bytes, **grads_kw)
    if model.hybrid and model.mamba is not None and "M" in model.layer_pattern:
        from fitplan.counts import hybrid as HY
        backward = maximum(backward, ev(RT.mamba_backward_bytes, s=sh.s, b=b, h=sh.h, e=sh.e, t=tp, c=cp,
                                        sp=c.sequence_parallel,
                                        W_in=HY.in_proj_width(model), d=model.mamba.d_inner, w=w_grad))
    if moe is not None:
        backward = maximum(backward, ev(RT.layer_backward_bytes, key="runtime/layer_backward_moe", **grads_kw,
                                        k=sh.moe.k, rho=sh.moe.rho, f_e=sh.moe.f_e, f_s=sh.moe.f_s))
    out["runtime/layer_backward"] = backward
    loss = dict(s=sh.s, b=b, V=model.vocab_size, e=sh.e, t=tp, c=cp, kernel=training.cross_entropy)
    chunks = {"k": training.ce_chunks} if training.cross_entropy == "chunked" else {}
    out["runtime/logits_grad"] = _held(ev, stage.head, lambda: ev(RT.logits_grad_bytes, **loss, h=sh.h, w=w_grad,
                                                                 **chunks))
    aux = untraced(ev)   # the moments' values beside the parts, which an explanation does not list
    out[TL.LOSS_FORWARD] = _held(ev, stage.head, lambda: RT.loss_forward_bytes(**loss, h=sh.h, w=recipe.weights_bytes,
                                                                               **chunks))
    out[TL.OUTPUT_ONE] = _held(ev, stage.head, lambda: aux(
        A.output_bytes, s=sh.s, b=b, h=sh.h, V=model.vocab_size, e=sh.e, t=tp, c=cp, sp=c.sequence_parallel,
        n_mb=1 + model.mtp_depth, **loss_kept(setup, b=b, t=tp, c=cp)))   # as activations/output counts one micro-batch
    out["runtime/p2p"] = ev(RT.p2p_bytes, e=sh.e, s=sh.s, b=b, h=sh.h, t=tp, c=cp, sp=c.sequence_parallel, pp=pp)
    n_opt = select(zero >= 1, n_d, 1)
    psi_opt = ceil_div(psi_t, n_opt) + ceil_div(psi_e, select(zero >= 1, n_ed, 1))
    # foreach's scratch is shaped like Adam's second moment; 8-bit and one-moment optimizers keep none
    v = recipe.moments[1][1] if len(recipe.moments) == 2 and recipe.moments[1][1] >= 2 else 0
    if OF.offload_of(c).optimizer:   # the CPU steps the optimizer (ZeRO-Offload): no GPU temporaries
        out["runtime/optimizer_step"] = 0
    else:
        out["runtime/optimizer_step"] = ev(RT.optimizer_step_bytes, psi_opt=psi_opt, v=v, g=recipe.grads_bytes,
                                           m=recipe.master_bytes, impl=training.optimizer_impl)
    out[TL.STREAMS] = 1 + 2 * zero3   # the compute stream; FSDP2's all-gather and reduce-scatter streams
    return out


def loss_kept(setup: Setup, *, b, t, c) -> dict:
    """What the loss keeps for its backward, as activations.output_bytes takes it: x bytes per logit (4: fp32;
    2: torchtune's chunked loss compiled, bf16 chunks; 0: a fused linear cross-entropy), the head's input
    kept or not (k_in), and what a fused linear cross-entropy holds instead of logits: the output layer's
    input gradient (e*s*b*h/c), its weight gradient in the weights' dtype (w*V*h/t; none for a frozen head)
    and the per-token losses (4*s*b/c) (Liger-Kernel ops/fused_linear_cross_entropy.py: grad_input,
    grad_weight and loss_1d saved for backward)."""
    training, model = setup.training, setup.model
    lora, ce = FT.is_lora(training), training.cross_entropy
    out = {"k_in": 1} if lora or ce == "linear" else {}
    if ce == "linear":
        s, h, e = training.seq_len, model.hidden_size, training.act_bytes
        w = 0 if lora else training.recipe.weights_bytes
        out.update(x=0, held=ceil_div(e * s * b * h, c) + ceil_div(w * model.vocab_size * h, t) + ceil_div(4 * s * b, c))
    elif ce == "chunked" and training.kernels == "compiled":
        out["x"] = 2
    return out


def _largest_trained(setup: Setup, c, *, stage: Stage, trained: dict):
    """The largest trained parameter tensor on a GPU of the stage: a layer's widest matrix split over tp, or the
    embedding or output layer where the stage holds them; no more than the rank's trained parameters."""
    model = setup.model
    widest = FT.largest_linear(model)
    if model.moe is not None:
        widest = max(widest, model.hidden_size * model.moe.expert_ffn_size)
    table = model.vocab_size * model.hidden_size   # (the search's stage flags may be float arrays: no `|` on them)
    ends = maximum(select(stage.embedding, table, 0), select(stage.head, table, 0))
    return minimum(ceil_div(maximum(widest, ends), c.tp), trained["psi"] + trained.get("psi_e", 0))


COMMUNICATOR_TERMS = ("runtime/nccl", "runtime/deepep")   # what _communicators returns


def _communicators(ev, setup: Setup, c) -> dict:
    """NCCL's buffers for the communicators the layout creates (fitplan.memory.runtime.nccl_bytes), and
    DeepEP's where it dispatches the experts' tokens. Rings: tp, the gradient reduction group (dp x cp), the
    experts' data-parallel group, cp when its K/V exchange is an all-gather, the world group when larger
    than all of them. p2p: the pipeline's neighbours, cp's K/V ring (TE's p2p, with --cp-comm-overlap) and
    an NCCL all-to-all's expert group; ranks in Megatron-Core's order (fitplan.timing.axes.placement)."""
    from fitplan.timing.comm import group_is_intra_node
    cluster, G = setup.cluster, setup.cluster.gpus_per_node
    tp, pp, dp, cp, ep = c.tp, c.pp, c.dp, c.cp, c.ep
    world = tp * cp * dp * pp
    n_ed = maximum(floor_div(tp * cp * dp, maximum(ep, 1)), 1)
    cp_p2p = 1 if getattr(c, "cp_comm_overlap", True) else 0
    nccl_a2a = setup.training.moe_dispatcher != "deepep" and setup.model.moe is not None
    largest = maximum(maximum(tp, cp * dp), maximum(maximum(pp, cp), ep))
    rings = (1 * (tp > 1) + 1 * (dp * cp > 1) + 1 * ((ep > 1) & (n_ed > 1)) + (1 - cp_p2p) * (cp > 1)
             + 1 * (world > largest))   # 1 *: NumPy's bools add as "or"
    gpu = cluster.gpu
    nvlink = "pcie" not in gpu.intra_node.name.lower()
    net_ch = maximum(1, ceil_div(gpu.inter_node.bytes_per_s, RT.NCCL_P2P_PER_CHANNEL_NET_GBPS * 10**9))
    P2P = RT._pow2_up(minimum(cluster.nccl_channels, RT.NCCL_MAX_CHANNELS))
    groups = []
    for n, stride, used in ((pp, tp * cp * dp, pp > 1), (cp, tp, (cp > 1) & (cp_p2p == 1))):
        intra = group_is_intra_node(stride=stride, n=n, G=G)
        peers = select(used & intra, minimum(2, n - 1), 0 * n)
        spans = used & ~intra if is_array(intra) else bool(used) and not bool(intra)
        ch = RT.p2p_channels_per_peer(P2P=P2P, n=n, spans=spans, net_ch=net_ch, nvlink=nvlink)
        groups.append((peers, ch, 1 * spans))
    if nccl_a2a:   # ep consecutive ranks: min(ep, G) - 1 peers on this node, the rest across nodes
        spans = ep > G
        ch = RT.p2p_channels_per_peer(P2P=P2P, n=ep, spans=spans, net_ch=net_ch, nvlink=nvlink)
        groups.append((select(ep > 1, minimum(ep, G) - 1, 0 * ep), ch, 1 * spans))
    out = {"runtime/nccl": ev(RT.nccl_bytes, C=cluster.nccl_channels, buffsize=cluster.nccl_buffsize_bytes,
                              rings=rings, p2p_groups=tuple(groups))}
    deepep = setup.model.moe is not None and setup.training.moe_dispatcher == "deepep"
    out["runtime/deepep"] = (ev(RT.deepep_bytes, ep=ep, h=setup.model.hidden_size, e=setup.training.act_bytes)
                             if deepep else 0)
    return out


def _lora_states(ev, setup: Setup, c, *, stage: Stage, psi, n_d) -> tuple[dict, dict, object]:
    """The states of a frozen base with rank-r adapters (fitplan.memory.finetune), the trained
    parameters' sharding (for offload's host gradients), and the bytes ZeRO-3 shards and
    gathers of the stage (FT.frozen_sharded_bytes)."""
    model, training, recipe = setup.model, setup.training, setup.training.recipe
    l, zero = stage.layers, c.zero
    P_a = ev(FT.adapter_params, l=l, r=training.lora_rank, D=FT.adapter_dims(model, training)[0], t=c.tp)
    psi_lin = ev(FT.stage_linear_params, l=l, P_lin=FT.linear_params(model), t=c.tp)
    precision = FT.base_precision(training)
    W_lin = ev(FT.quantized_weight_bytes, psi=psi_lin, precision=precision, w=recipe.weights_bytes)
    C_q = ev(FT.quant_constant_bytes, psi=psi_lin, precision=precision)
    W_shard = ev(FT.frozen_sharded_bytes, W_lin=W_lin, C_q=C_q, psi=psi, psi_lin=psi_lin, P_a=P_a,
                 w=recipe.weights_bytes)
    out = {"states/weights": ev(FT.frozen_weights_bytes, W_shard=W_shard, C_q=C_q, n_d=n_d, zero=zero),
           "states/grads": ev(FT.adapter_grads_bytes, P_a=P_a, g=recipe.grads_bytes, n_d=n_d, zero=zero),
           "states/master": ev(FT.adapter_master_bytes, P_a=P_a, m=recipe.master_bytes, n_d=n_d, zero=zero),
           "states/optimizer": ev(FT.adapter_optimizer_bytes, P_a=P_a, K=recipe.optimizer_bytes, n_d=n_d, zero=zero)}
    return out, dict(psi=P_a, n_d=n_d, zero=zero), W_shard


def _held(ev, holds, compute):
    """A term only some stages hold: computed (and explained) only where it is held."""
    if is_array(holds):
        return untraced(ev)(held_bytes, x=compute(), holds=holds)
    return compute() if holds else 0


@formula("aux/held", "x where the stage holds the term, else 0", Cite("fitplan", "formulas.md#peak"))
def held_bytes(*, x, holds):
    """x on the candidates whose stage holds the term (the search's arrays), 0 elsewhere."""
    return x * holds


HOST_KEYS = OF.HOST_PARTS + OF.NVME_PARTS


@record(slots=True)
class Breakdown:
    """The busiest GPU of one configuration, term by term, with the Terms that explain it (`terms`).
    parts: each term's bytes (the allocator's at the peak); peak: the step's largest moment and
    what it holds (fitplan.memory.timeline); aux: what the timeline reads beside the parts."""
    config: ParallelConfig
    stage: str                 # "only" (pp = 1), "first", "last" or "stage i"
    parts: dict                # key -> bytes, in PARTS order
    explain: Callable[[], tuple] = field(compare=False, repr=False)   # the terms, computed when read
    usable_bytes: int
    reserve_bytes: int
    stage_index: int = 0                 # the busiest pipeline rank
    num_layers: int = 0                  # the model's layers (stage_layers splits them)
    host: dict = field(default_factory=dict)   # host/* and nvme/* bytes per GPU (offload), of the rank with most
    host_per_node_bytes: int = 0         # host memory one node needs (fitplan.memory.offload.per_node_bytes)
    nvme_per_node_bytes: int = 0
    host_limit_bytes: int | None = None  # the cluster's --host-memory per node; None: not limited
    peak: TL.Peak | None = None
    aux: dict = field(default_factory=dict)
    capacity_bytes: int = 0

    @property
    def terms(self) -> tuple[Term, ...]:
        """Every formula evaluated for the busiest rank, in call order. evaluate compares the ranks
        untraced and records the busiest one's Terms only when they are read (an explanation, the
        seed's state formulas; a plan's suggestions print only the numbers), by evaluating it again
        with a Trace: the same code on the same ints gives the same values."""
        return self.explain()

    @property
    def stage_layers(self) -> tuple[int, ...]:
        """Layers per pipeline stage, stage 0 first (fitplan.counts.stages.split; computed when read: a search's
        report prints the peaks, not the split, and Llama 3.1 405B's 128 stages of one chunk take ~0.3 ms)."""
        c = self.config
        return ST.split(self.num_layers, c.pp, c.virtual_stages, c.first_stage_layers, c.last_stage_layers)

    @property
    def state_bytes(self) -> int:
        return sum(self.parts[k] for k in STATE_PARTS)

    @property
    def activation_bytes(self) -> int:
        """The peak beyond the model states: activations and runtime buffers held then."""
        return self.per_gpu_bytes - self.state_bytes

    @property
    def per_gpu_bytes(self) -> int:
        """The step's peak on the busiest GPU (fitplan.memory.timeline)."""
        return self.peak.bytes

    @property
    def headroom_bytes(self) -> int:
        return self.usable_bytes - self.per_gpu_bytes

    @property
    def host_fits(self) -> bool:
        return self.host_limit_bytes is None or self.host_per_node_bytes <= self.host_limit_bytes

    @property
    def fits(self) -> bool:
        return self.per_gpu_bytes <= self.usable_bytes and self.host_fits


def _stage_peak(trace, setup: Setup, parts: dict) -> TL.Peak:
    """The stage's peak, its allocator term recorded in the trace at the peak's moment (trace: a
    Trace, or RAW to record nothing)."""
    phi = setup.training.fragmentation
    pk = TL.peak(parts, phi=phi)
    held = dict(pk.held)
    held["runtime/allocator"] = trace(RT.allocator_bytes, phi=phi, D=TL.transient_bytes(
        {k: v for k, v in pk.held.items() if k != "runtime/allocator"}), streams=parts[TL.STREAMS])
    return TL.Peak(pk.bytes, pk.moment, pk.phase, held)


def evaluate(setup: Setup, config: ParallelConfig) -> Breakdown:
    """Exact integer breakdown of the busiest GPU, with its explanation: the candidate ranks
    (candidate_ranks: one of each composition, at its most micro-batches in flight) are
    evaluated, the largest peak wins (the lowest rank among equals). Host memory (offload) is
    the most of any candidate rank's. Everything is evaluated untraced (RAW: the same ints); the
    busiest rank's Terms are recorded when Breakdown.terms is read, by evaluating that rank again
    with a Trace (a Trace costs about twice RAW, and DeepSeek-V3's layouts have six to eight
    candidate ranks)."""
    best, host, host_parts, comms = None, (0, 0), {}, None
    for i in sorted(set(candidate_ranks(setup.model, config))):
        parts = stage_memory(RAW, setup, config, stage=stage_at(RAW, setup.model, config, i), comms=comms)
        comms = comms or {key: parts[key] for key in COMMUNICATOR_TERMS}   # no rank changes them (busiest_totals)
        pk = _stage_peak(RAW, setup, parts)
        if best is None or pk.bytes > best[1].bytes:
            best = (i, pk, parts)
        if OF.host_total(parts) + OF.nvme_total(parts) > sum(host):
            host_parts = parts
        host = max(host[0], OF.host_total(parts)), max(host[1], OF.nvme_total(parts))
    i, pk, parts = best
    p = config.pp
    stage = "only" if p == 1 else "first" if i == 0 else "last" if i == p - 1 else f"stage {i}"
    cluster = setup.cluster

    def host_per_node(ev) -> list:   # host bytes, each process on a node
        if config.offload is Offload.NONE and not setup.training.paged_optimizer:
            return [0, 0]
        return [ev(OF.per_node_bytes, key=key, per_gpu=x, G=cluster.gpus_per_node, N=cluster.num_gpus)
                if x or key == "host/per_node" else 0
                for key, x in (("host/per_node", host[0]), ("nvme/per_node", host[1]))]

    def explain() -> tuple:
        trace = Trace()
        traced = stage_memory(trace, setup, config, stage=stage_at(trace, setup.model, config, i))
        _stage_peak(trace, setup, traced)
        host_per_node(trace)
        return tuple(trace.terms)
    per_node = host_per_node(RAW)
    aux = {k: v for k, v in parts.items() if k.startswith("aux/")}
    held_at = TL.moments(parts, phi=setup.training.fragmentation).values()
    shown = {k: max(int(h[k]) for h in held_at if k in h) for k in PARTS}   # each term at its largest
    return Breakdown(config=config, stage=stage, parts={k: shown[k] for k in PARTS}, explain=explain,
                     usable_bytes=cluster.usable_bytes, reserve_bytes=cluster.reserve_bytes,
                     stage_index=i, num_layers=setup.model.num_layers,
                     host={k: host_parts.get(k, 0) for k in HOST_KEYS}, host_per_node_bytes=per_node[0],
                     nvme_per_node_bytes=per_node[1], host_limit_bytes=cluster.host_memory_bytes,
                     peak=pk, aux=aux, capacity_bytes=cluster.gpu.memory_bytes)


def busiest_total(setup: Setup, c):
    """The step's peak on the busiest stage, over arrays of candidates (the search's path):
    the most of the candidate ranks' closed-form peaks (fitplan.memory.timeline.peak_bytes)."""
    return busiest_totals(setup, c)[0]


def busiest_totals(setup: Setup, c, ev=RAW, comms: dict | None = None):
    """(the step's peak on the busiest stage, host bytes per node): the most of the candidate
    ranks for each (closed-form peaks: fitplan.memory.timeline.peak_bytes); the host figure is
    0 without offload. ev: RAW, or the search's fitplan.explain.Memo. comms: a dict the caller
    keeps across calls on the same candidates' degrees (the search's screens): filled with the
    communicators' terms on the first, read on the rest."""
    out = host = None
    for t, x in _rank_totals(setup, c, ev, comms):
        out = t if out is None else maximum(out, t)
        host = x if host is None else maximum(host, x)
    if getattr(c, "stacked", None) is not None:   # the busiest of the stacked ranks
        out = out.max(axis=0)
        if is_array(host) and host.ndim > out.ndim:
            host = host.max(axis=0)
    if host is None:
        return out, 0
    cluster = setup.cluster
    return out, OF.per_node_bytes(per_gpu=host, G=cluster.gpus_per_node, N=cluster.num_gpus)


def _rank_totals(setup: Setup, c, ev, comms: dict | None):
    """Each candidate rank's (peak, host bytes per GPU or None without offload), in candidate_stages' order;
    the search's screening view gives one pair, its ranks stacked on a leading axis (fitplan.search._Grid.box:
    one pass over the terms for every rank)."""
    comms = {} if comms is None else comms
    stacked = getattr(c, "stacked", None) is not None
    over = None
    if stacked:   # an array spanning the ranks axis has the box's axes and that one: each moment's most over it
        ranked = c.tp.ndim + 1
        over = lambda a, b=0: _most_over_ranks(a, b, ranked)
    hosted = OF.offload_of(c) is not Offload.NONE or setup.training.paged_optimizer
    for st in [c.stacked] if stacked else candidate_stages(setup.model, c):
        parts = stage_memory(ev, setup, c, stage=st, comms=comms or None)
        # NCCL's and DeepEP's buffers depend on the degrees only: computed for the first rank, a
        # third of the screening's time when each rank recomputed them
        if not comms:
            comms.update((key, parts[key]) for key in COMMUNICATOR_TERMS)
        yield TL.peak_bytes(parts, phi=setup.training.fragmentation, ev=ev, over_ranks=over), (
            OF.host_total(parts) if hosted else None)


def _most_over_ranks(a, b, ranked: int):
    """The most of a + b over the leading ranks axis (kept, of length 1), where an array spanning that axis has
    `ranked` dimensions; formed one rank at a time and folded into one result. The whole sum spans the box's
    every axis at once (a Llama 3.1 405B screen: 4 ranks x 4 ZeRO stages x 16 micro-batch settings x 4 x 128
    layouts, a MiB of float64 per temporary), and its temporaries went back to the OS and were faulted in again
    on every call: 0.85 ms against 0.20 ms for the same maxima (bench/results-2026-12-03.md, "The busiest rank's
    reduction"). The sums and maxima are the same numbers either way."""
    import numpy as np
    spans = [getattr(x, "ndim", 0) == ranked for x in (a, b)]
    n = max((x.shape[0] for x, s in zip((a, b), spans) if s), default=1)
    if n == 1:
        return a + b
    rank = lambda x, s, r: x[r if x.shape[0] > 1 else 0] if s else x
    out = rank(a, spans[0], 0) + rank(b, spans[1], 0)
    one = np.empty_like(out)
    for r in range(1, n):
        np.maximum(out, np.add(rank(a, spans[0], r), rank(b, spans[1], r), out=one), out=out)
    return out[None]


def fits(setup: Setup, config: ParallelConfig) -> bool:
    """Breakdown.fits of one configuration without its explanation: on ints busiest_totals is
    exactly the peak and the host bytes per node that evaluate gives (tests/unit/test_search.py).
    The ranks are taken in turn and the first over a limit answers: a micro-batch past the largest
    that fits is usually over on the first rank (most micro-batches in flight), so its other ranks
    are never formed."""
    cluster = setup.cluster
    usable, limit = cluster.usable_bytes, cluster.host_memory_bytes
    for peak, host in _rank_totals(setup, config, RAW, None):
        if peak > usable:
            return False
        if limit is not None and host is not None and OF.per_node_bytes(
                per_gpu=host, G=cluster.gpus_per_node, N=cluster.num_gpus) > limit:
            return False
    return True
