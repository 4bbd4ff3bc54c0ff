"""run_validation's body: every check, as rows of a ValidationReport. Imports torch."""
import torch

from fitplan.counts.params import shape_params
from fitplan.errors import SpecError
from fitplan.memory.breakdown import evaluate
from fitplan.specs import ModelSpec, ParallelConfig, Recompute
from fitplan.specs.parallel import SEARCHED_RECOMPUTE   # the LoRA rows: the three modes its reference runs
from fitplan.validate import distributed as D
from fitplan.validate import expected as X
from fitplan.validate.measure import count_flops, count_params, cuda_peak, cuda_step, saved_activations
from fitplan.validate.reference_model import IMPLEMENTED_RECOMPUTE, MOE_RECOMPUTE, is_moe_layer
from fitplan.validate.report import Extra, Row, ValidationReport

ACT_BYTES = (2, 4)   # bf16, fp32
DTYPE_NAME = {2: "bf16", 4: "fp32"}


def params_rows(model: ModelSpec) -> list[Row]:
    return [Row(section="parameters", quantity="parameters (count, meta device)", unit="params",
                planner=shape_params(model), measured=count_params(model),
                note="fitplan.counts.params.shape_params vs sum(p.numel()) of the reference model")]


def _layer_kinds(model: ModelSpec) -> list[tuple[str, bool, list[int]]]:
    """(row prefix, MoE?, layer indices) for each kind of layer the model has."""
    moe = [i for i in range(model.num_layers) if is_moe_layer(model, i)]
    dense = [i for i in range(model.num_layers) if i not in moe]
    return [k for k in (("layer", False, dense), ("moe layer", True, moe)) if k[2]]


def _moe_note(model: ModelSpec, got, layers: list[int]) -> str:
    loads = [got.expert_tokens[i] for i in layers]
    rho = max(max(t) * len(t) / sum(t) for t in loads)
    return (f"activations.per_layer_bytes with breakdown.MoeShapes (k={model.moe.experts_per_token}, rho=1, "
            "dropless). "
            f"Tokens per expert {'; '.join(', '.join(map(str, t)) for t in loads)}: busiest/mean {rho:.3f}. On one "
            "rank holding every expert each of the k*s*b routed copies is stored once wherever it goes, so the "
            "planner's rho = 1 (training.moe_imbalance) is exact here; the load imbalance matters once ep > 1")


OP_NOTE = ("op: torchtitan's op-level SAC policy (every second aten.mm, SDPA, reduce_scatter saved) on SDPA "
           "attention without attention dropout; its cache is measured from the checkpoint's storage. "
           "Linears with a bias run as aten.addmm, which the policy neither saves nor counts")
NORMS_NOTE = ("norms: Megatron-LM's CheckpointWithoutOutput on both norms (output storage freed after its "
              "consumers saved it, refilled in backward); the norms' statistics go too")


def activation_rows(model: ModelSpec, *, seq_len: int, micro_batch: int, device: str = "cpu") -> list[Row]:
    """Per layer, for each dtype and recompute mode (dense and MoE layers in rows of their
    own); and the embedding + output once per dtype."""
    rows = []
    section = f"activations per layer ({device}, dropout 0.1, one micro-batch)"
    for e in ACT_BYTES:
        for recompute in IMPLEMENTED_RECOMPUTE:
            kw = dict(seq_len=seq_len, micro_batch=micro_batch, act_bytes=e, recompute=recompute)
            got = saved_activations(model, device=device, **kw)
            for prefix, moe_layer, layers in _layer_kinds(model):
                if moe_layer and recompute not in MOE_RECOMPUTE:
                    continue
                planner = X.planner_layer_bytes(model, moe_layer=moe_layer, **kw)
                extras = X.layer_extras(model, device=device, moe_layer=moe_layer, **kw)
                pred = planner + sum(x.value for x in extras)
                measured = tuple(got.per_layer[i] for i in layers)
                rows.append(Row(section=section, quantity=f"{prefix} {DTYPE_NAME[e]} {recompute.value}",
                                planner=planner, extras=extras, measured=max(measured),
                                per_rank_predicted=(pred,) * len(layers), per_rank_measured=measured,
                                parts_label="layer", note=_moe_note(model, got, layers)
                                if moe_layer and e == ACT_BYTES[0] and recompute is Recompute.NONE else
                                OP_NOTE if recompute is Recompute.OP and e == ACT_BYTES[0] and not moe_layer
                                else NORMS_NOTE if recompute is Recompute.NORMS and e == ACT_BYTES[0] else ""))
            if recompute is Recompute.NONE:
                outside = dict(seq_len=seq_len, micro_batch=micro_batch, act_bytes=e)
                rows.append(Row(section=section, quantity=f"embedding + output + loss {DTYPE_NAME[e]}",
                                planner=X.planner_outside_bytes(model, **outside),
                                extras=X.outside_extras(model, device=device, **outside), measured=got.outside,
                                note="activations.embedding_bytes (n_mb=1) + activations.output_bytes"))
    return rows


LORA = (4, "qkv,o,mlp")   # rank and targets of the adapter rows


def lora_rows(model: ModelSpec, *, seq_len: int, micro_batch: int, lora=LORA) -> list[Row]:
    """A frozen base with rank-r adapters on every target: trained parameters, weights,
    gradients and Adam state (fp32, one step), and the bytes each layer and the embedding and
    output store (bf16 and fp32; no, selective and full recompute)."""
    from fitplan.validate.reference_lora import lora_states
    rank, targets = lora
    section = f"LoRA (rank {rank} on {targets}, frozen base, cpu)"
    got = lora_states(model, rank=rank, targets=targets, seq_len=seq_len, micro_batch=micro_batch)
    want = X.planner_lora(model, seq_len=seq_len, micro_batch=micro_batch, act_bytes=4, recompute=Recompute.NONE,
                          lora=lora)
    rows = [Row(section=section, quantity="adapter parameters (trained)", unit="params", planner=want["params"],
                measured=got["trained_params"], note="fitplan.memory.finetune.adapter_params: l*r*sum(d_in + d_out)"),
            Row(section=section, quantity="frozen base parameters", unit="params", planner=shape_params(model),
                measured=got["frozen_params"]),
            Row(section=section, quantity="weights (frozen base + adapters, fp32)", planner=want["weights"],
                measured=got["weights"]),
            Row(section=section, quantity="gradients (adapters only)", planner=want["grads"], measured=got["grads"]),
            Row(section=section, quantity="optimizer state (Adam over the adapters)", planner=want["optimizer"],
                extras=(X.adam_steps(got["adapter_tensors"]),), measured=got["optimizer"])]
    for e in ACT_BYTES:
        for recompute in SEARCHED_RECOMPUTE:
            kw = dict(seq_len=seq_len, micro_batch=micro_batch, act_bytes=e, recompute=recompute)
            measured = saved_activations(model, lora=lora, **kw)
            planner = X.planner_lora(model, lora=lora, **kw)
            extras = X.layer_extras(model, **kw)
            pred = planner["layer"] + sum(x.value for x in extras)
            rows.append(Row(section=section, quantity=f"layer {DTYPE_NAME[e]} {recompute.value}",
                            planner=planner["layer"], extras=extras, measured=max(measured.per_layer),
                            per_rank_predicted=(pred,) * model.num_layers, per_rank_measured=measured.per_layer,
                            parts_label="layer",
                            note="memory.finetune.lora_layer_bytes: frozen matrices keep no input"
                            if (e, recompute) == (ACT_BYTES[0], Recompute.NONE) else ""))
            if recompute is Recompute.NONE:
                outside = dict(seq_len=seq_len, micro_batch=micro_batch, act_bytes=e)
                rows.append(Row(section=section, quantity=f"embedding + output + loss {DTYPE_NAME[e]}",
                                planner=planner["outside"], extras=X.lora_outside_extras(model, **outside),
                                measured=measured.outside,
                                note="a frozen embedding keeps no token ids, a frozen head no input"))
    for recompute in SEARCHED_RECOMPUTE:
        kw = dict(seq_len=seq_len, micro_batch=micro_batch, recompute=recompute)
        rows.append(Row(section=section, unit="FLOP", quantity=f"hardware FLOPs {recompute.value}",
                        planner=X.planner_flops(model, lora=lora, **kw), extras=X.flops_extras(model, **kw),
                        measured=count_flops(model, lora=lora, **kw),
                        note="counts.flops.backward_flops less frozen_weight_grad_flops: no weight gradients for "
                             "the frozen matrices and head" if recompute is Recompute.NONE else ""))
    return rows


def flops_rows(model: ModelSpec, *, seq_len: int, micro_batch: int) -> list[Row]:
    rows = []
    for recompute in IMPLEMENTED_RECOMPUTE if model.moe is None else MOE_RECOMPUTE:
        kw = dict(seq_len=seq_len, micro_batch=micro_batch, recompute=recompute)
        rows.append(Row(section="FLOPs (FlopCounterMode, forward + backward, one micro-batch)", unit="FLOP",
                        quantity=f"hardware FLOPs {recompute.value}", planner=X.planner_flops(model, **kw),
                        extras=X.flops_extras(model, **kw), measured=count_flops(model, **kw),
                        note="counts.flops.hardware_flops: GEMMs only, 2xyz each" if recompute is Recompute.NONE
                        else ""))
    return rows


def step_rows(model: ModelSpec, *, seq_len: int, micro_batch: int) -> list[Row]:
    """The peak over one training step (fitplan.memory.timeline) against live tensor bytes on CPU
    (fitplan.validate.peak): for each dtype and recompute mode, the loss's backward (its fp32 logit
    gradients; exact), a layer's backward (the planner's upper bound), the optimizer step (foreach
    AdamW's scratch; fused: none; exact) and the step's peak, all beyond the model states."""
    from fitplan.validate.peak import measure_step
    rows = []
    section = f"peak over one step (cpu, live tensor bytes beyond the model states, AdamW)"
    kw = dict(seq_len=seq_len, micro_batch=micro_batch)
    batch = X.batch_extra(**kw)
    for e in ACT_BYTES:
        for recompute in SEARCHED_RECOMPUTE:
            name = f"{DTYPE_NAME[e]} {recompute.value}"
            got = measure_step(model, act_bytes=e, recompute=recompute, optimizer_impl="foreach", **kw)
            plan = X.planner_moments(model, act_bytes=e, recompute=recompute, optimizer_impl="foreach", **kw)
            extras = X.step_extras(model, act_bytes=e, recompute=recompute, **kw)
            states_extra = (X.adam_steps(len(list(_tensors(model)))),)
            if recompute is Recompute.NONE:
                rows.append(Row(section=section, quantity=f"model states {name} (weights, grads, AdamW)",
                                planner=plan["states"], extras=states_extra, measured=got.states))
            rows.append(Row(section=section, quantity=f"loss backward {name} (stored + logit gradients)",
                            planner=plan["loss"], extras=extras, measured=got.peaks["loss backward"],
                            note=f"runtime/logits_grad = {plan['logits_grad']:,} B: F.cross_entropy's nll_loss and "
                                 f"log_softmax fp32 gradients, measured as the rise over the loss's backward: "
                                 f"{got.peaks['loss backward'] - got.before['loss backward']:,} B"
                            if recompute is Recompute.NONE else ""))
            rows.append(Row(section=section, quantity=f"layers backward {name} (planner's upper bound)",
                            planner=plan["layer"], extras=extras, measured=got.peaks["layers backward"], relation="<=",
                            note="runtime/layer_backward bounds one layer's gradients from above (both the "
                                 "attention's and the MLP's widest); the recompute workspace holds a whole layer"
                            if recompute is Recompute.NONE and e == ACT_BYTES[0] else ""))
            rows.append(Row(section=section, quantity=f"optimizer step {name} (foreach AdamW)",
                            planner=plan["step"], extras=(batch,), measured=got.peaks["optimizer step"],
                            note="runtime/optimizer_step: _foreach_sqrt of every second moment at once, v*psi"
                            if recompute is Recompute.NONE and e == ACT_BYTES[0] else ""))
            peak, peak_extras = max(((plan["loss"], extras), (plan["layer"], extras), (plan["step"], (batch,))),
                                    key=lambda m: m[0] + sum(x.value for x in m[1]))
            rows.append(Row(section=section, quantity=f"step peak {name}", planner=peak, extras=peak_extras,
                            measured=max(v for k, v in got.peaks.items() if k != "embedding backward"),
                            relation="<=", note="the embedding's own backward (its dense weight gradient, at the "
                                                "step's end) is left out: it is a peak only for models this small"
                            if recompute is Recompute.NONE and e == ACT_BYTES[0] else ""))
    got = measure_step(model, act_bytes=4, recompute=Recompute.NONE, optimizer_impl="fused", **kw)
    plan = X.planner_moments(model, act_bytes=4, recompute=Recompute.NONE, optimizer_impl="fused", **kw)
    rows.append(Row(section=section, quantity="optimizer step fp32 none (fused AdamW)", planner=plan["step"],
                    extras=(batch,), measured=got.peaks["optimizer step"],
                    note="fused=True keeps no temporaries: runtime/optimizer_step = 0"))
    return rows


def _tensors(model: ModelSpec):
    from fitplan.validate.reference_model import build
    return build(model, device="meta").parameters()


def distributed_rows(model: ModelSpec, *, seq_len: int, micro_batch: int, world: int) -> tuple[list[Row], list[str]]:
    records = D.measure_distributed([model], seq_len=seq_len, micro_batch=micro_batch, world_size=world)
    rows = D.state_rows(model, records, seq_len=seq_len, world=world)
    rows += D.tp_activation_rows(model, records, seq_len=seq_len, micro_batch=micro_batch, world=world)
    rows += D.pp_activation_rows(model, records, seq_len=seq_len, micro_batch=micro_batch, world=world)
    rows += D.runtime_rows(model, records, seq_len=seq_len, micro_batch=micro_batch, world=world)
    notes = [f"world {world}: skipped {reason}" for check in D.CHECKS
             if (reason := D.skip_reason(check, model, world=world, seq_len=seq_len))]
    return rows, notes


def cuda_rows(model: ModelSpec, *, seq_len: int, micro_batch: int, device: str = "cuda") -> list[Row]:
    """Peak allocated over two fp32 Adam steps vs the planner's per-GPU total (fp32-adam,
    act_bytes 4, no reserve), the states as CUDA tensors, and the judged peaks (judged_cuda_rows)."""
    rows = []
    if device == "cuda":
        got = cuda_peak(model, seq_len=seq_len, micro_batch=micro_batch, recompute=Recompute.NONE)
        setup = X.setup_for(model, seq_len=seq_len, act_bytes=4)
        breakdown = evaluate(setup, ParallelConfig(micro_batch=micro_batch))
        section = f"cuda states ({got['device_name']}, fp32, two Adam steps)"
        states = {k: breakdown.parts[v] for k, v in (("params", "states/weights"), ("grads", "states/grads"))}
        states["optimizer"] = breakdown.parts["states/master"] + breakdown.parts["states/optimizer"]
        rows += [Row(section=section, quantity=f"{k} (cuda tensors)", planner=v, measured=got[k])
                 for k, v in states.items()]
    for recompute in SEARCHED_RECOMPUTE:
        rows += judged_cuda_rows(model, seq_len=seq_len, micro_batch=micro_batch, recompute=recompute, device=device)
    return rows


TOLERANCE = 0.05   # issue 15's target: the predicted peak within 5% of max_memory_reserved


def judged_cuda_rows(model: ModelSpec, *, seq_len: int, micro_batch: int, recompute: Recompute,
                     device: str = "cuda") -> list[Row]:
    """One training step on the GPU (measure.cuda_step, fused AdamW, fp32) judged against the
    planner's peak for the same one-GPU run (fitplan.memory.timeline): max_memory_reserved against
    the peak less what lies outside the allocator (the CUDA context, NCCL: none on one GPU), and
    max_memory_allocated against that less the allocator's pages, each within TOLERANCE; the
    context itself is reported beside --cuda-context's default."""
    got = cuda_step(model, seq_len=seq_len, micro_batch=micro_batch, recompute=recompute, device=device)
    return judge_cuda(model, got, seq_len=seq_len, micro_batch=micro_batch, recompute=recompute, device=device)


def judge_cuda(model: ModelSpec, got: dict, *, seq_len: int, micro_batch: int, recompute: Recompute,
               device: str = "cuda") -> list[Row]:
    """The rows for one measured step (got: cuda_step's dict). The planner runs with the measured
    GPU's cuBLAS workspace (32 MiB from compute capability 9.0, else 8,519,680 B) and with
    --fragmentation 0.15 when the allocator ran without expandable segments."""
    from dataclasses import replace
    from fitplan.memory import timeline as TL
    setup = X.step_setup(model, seq_len=seq_len, act_bytes=4, optimizer_impl="fused")
    hopper = got.get("capability") is not None and tuple(got["capability"]) >= (9, 0)
    gpu = replace(setup.cluster.gpu, blas_workspace_bytes=32 * 2**20 if hopper else 8_519_680)
    phi = 0.0 if got.get("expandable_segments", True) else 0.15
    setup = replace(setup, cluster=replace(setup.cluster, gpu=gpu), training=replace(setup.training,
                                                                                     fragmentation=phi))
    b = evaluate(setup, ParallelConfig(micro_batch=micro_batch, recompute=recompute))
    held = b.peak.held
    extras = X.step_extras(model, seq_len=seq_len, micro_batch=micro_batch, act_bytes=4, recompute=recompute)
    if device == "cuda":   # CUDA's norms keep fp32 statistics (layer_extras' device)
        kw = dict(seq_len=seq_len, micro_batch=micro_batch, act_bytes=4)
        extras = tuple(Extra(x.key, x.value * model.num_layers, x.reason, x.cite)
                       for x in X.layer_extras(model, recompute=recompute, device="cuda", **kw)) + \
            X.outside_extras(model, device="cuda", **kw) + extras[-1:]
    states_extra = X.adam_steps(len(list(_tensors(model))))
    outside = sum(held[k] for k in TL.OUTSIDE_ALLOCATOR)
    reserved = b.per_gpu_bytes - outside
    allocated = reserved - held["runtime/allocator"]
    if device != "cuda":   # the stand-in has no cuBLAS workspace and no allocator: it reserves what it holds
        allocated -= held["runtime/blas_workspace"]
        reserved = allocated
    section = f"cuda peak ({got['device_name']}, fp32, fused AdamW, one step after a warm-up)"
    phase = f"the planner's peak: {b.peak.phase}"
    allocator = "expandable segments" if phi == 0 else "the default allocator, phi = 0.15"
    return [
        Row(section=section, quantity=f"max_memory_allocated, recompute {recompute.value}", planner=allocated,
            extras=(*extras, states_extra), measured=got["max_allocated"], relation="~=", tolerance=TOLERANCE,
            note=f"{phase}; less the context, NCCL and the allocator's pages"),
        Row(section=section, quantity=f"max_memory_reserved, recompute {recompute.value}", planner=reserved,
            extras=(*extras, states_extra), measured=got["max_reserved"], relation="~=", tolerance=TOLERANCE,
            note=f"{phase}; less the context and NCCL ({allocator})"),
        Row(section=section, quantity=f"outside the allocator (context), recompute {recompute.value}",
            planner=outside, measured=got["outside_allocator"], relation="info",
            note="torch.cuda.mem_get_info's used bytes less memory_reserved(): the CUDA context and loaded kernels "
                 "(--cuda-context)"),
    ]


PIPELINE_NOTE = ("pipeline parallel: torch.distributed.pipelining runs on CPU with gloo "
                 "(docs/engines.md#pipeline-parallel-on-cpu); the pp state rows use PipelineStage + ScheduleGPipe, "
                 "one stage per rank, 2 micro-batches; the pipeline-activation rows run the model with 2p + 1 layers "
                 "on the planner's uneven split under ScheduleGPipe and Schedule1F1B, 4 micro-batches, and record "
                 "each rank's peak of live saved-for-backward bytes over the second step (the first also runs "
                 "torch's metadata inference)")
NOTES = (
    "ZeRO-2/3 are measured with FSDP2 fully_shard; FSDP1 (SHARD_GRAD_OP / FULL_SHARD) also runs on CPU but "
    "is deprecated and flattens and pads differently (docs/engines.md#zero-1-fsdp1-and-fsdp2); it is not measured",
    "context parallel does not run on CPU (docs/engines.md#context-parallel-on-cpu): its terms are not validated here",
)


HYBRID_NOTES = (
    "a hybrid model (reference_hybrid: a pure-PyTorch Mamba-2 layer, the reference attention and MLP, one pre-norm "
    "each): its parameters, each kind of layer's stored bytes without recompute, and one step's FLOPs; the step, "
    "LoRA, distributed and CUDA rows are the transformer reference's and are not run",
)


def hybrid_rows(model: ModelSpec, *, seq_len: int, micro_batch: int) -> list[Row]:
    """A hybrid model: each kind of layer's stored bytes (bf16 and fp32, no recompute), the
    embedding and output, and one step's FLOPs."""
    from fitplan.counts.hybrid import KIND_NAMES
    rows = []
    section = "activations per layer (cpu, dropout 0.1, one micro-batch; hybrid)"
    for e in ACT_BYTES:
        kw = dict(seq_len=seq_len, micro_batch=micro_batch, act_bytes=e)
        got = saved_activations(model, recompute=Recompute.NONE, **kw)
        for kind in "M*-":
            layers = [i for i, k in enumerate(model.layer_pattern) if k == kind]
            if not layers:
                continue
            planner = X.planner_block_bytes(model, kind, **kw)
            extras = X.block_extras(model, kind, **kw)
            measured = tuple(got.per_layer[i] for i in layers)
            rows.append(Row(section=section, quantity=f"{KIND_NAMES[kind]} layer {DTYPE_NAME[e]} none",
                            planner=planner, extras=extras, measured=max(measured),
                            per_rank_predicted=(planner + sum(x.value for x in extras),) * len(layers),
                            per_rank_measured=measured, parts_label="layer",
                            note="activations.per_block_bytes with mamba_per_token_bytes: zxBCdt, out_x, the gated "
                                 "norm's input and fp32 rstd, out_proj's input" if kind == "M" and e == 2 else ""))
        rows.append(Row(section=section, quantity=f"embedding + output + loss {DTYPE_NAME[e]}",
                        planner=X.planner_outside_bytes(model, **kw), extras=X.outside_extras(model, **kw),
                        measured=got.outside, note="activations.embedding_bytes (n_mb=1) + activations.output_bytes"))
    kw = dict(seq_len=seq_len, micro_batch=micro_batch, recompute=Recompute.NONE)
    rows.append(Row(section="FLOPs (FlopCounterMode, forward + backward, one micro-batch)", unit="FLOP",
                    quantity="hardware FLOPs none", planner=X.planner_flops(model, **kw),
                    extras=X.hybrid_flops_extras(model, seq_len=seq_len, micro_batch=micro_batch),
                    measured=count_flops(model, **kw),
                    note="counts.flops: the projections' GEMMs, the SSD scan's four batched GEMM families "
                         "(ssd_flops) and its backward's reruns, the attention's; the conv and the state passing "
                         "are elementwise"))
    return rows


def run(*, model: ModelSpec, seq_len: int, micro_batch: int, world_sizes, device: str,
        include_distributed: bool) -> ValidationReport:
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecError("--device cuda: no CUDA device here; run on a machine with a GPU, or use --device cpu")
    if model.hybrid:
        rows = params_rows(model) + hybrid_rows(model, seq_len=seq_len, micro_batch=micro_batch)
        return ValidationReport(model=model.name, seq_len=seq_len, micro_batch=micro_batch, device=device,
                                torch_version=torch.__version__, rows=tuple(rows), notes=HYBRID_NOTES)
    rows = params_rows(model) + activation_rows(model, seq_len=seq_len, micro_batch=micro_batch)
    rows += step_rows(model, seq_len=seq_len, micro_batch=micro_batch)
    notes = list(NOTES)
    if model.moe is None:   # adapters are modelled on dense layers (fitplan.memory.finetune.check_supported)
        rows += lora_rows(model, seq_len=seq_len, micro_batch=micro_batch)
    else:
        notes.append("LoRA rows not run: adapters on mixture-of-experts layers are not modelled")
    try:
        rows += flops_rows(model, seq_len=seq_len, micro_batch=micro_batch)
    except (ImportError, AttributeError) as exc:   # fitplan.counts.flops is newer than this package
        notes.append(f"FLOPs not validated: fitplan.counts.flops is missing or changed ({exc})")
    if not include_distributed:
        notes.append("distributed checks not run (include_distributed=False)")
    else:
        notes.append(PIPELINE_NOTE)
        for world in world_sizes:
            more_rows, more_notes = distributed_rows(model, seq_len=seq_len, micro_batch=micro_batch, world=world)
            rows += more_rows
            notes += more_notes
    if device == "cuda":
        rows += activation_rows(model, seq_len=seq_len, micro_batch=micro_batch, device="cuda")
        rows += cuda_rows(model, seq_len=seq_len, micro_batch=micro_batch)
    return ValidationReport(model=model.name, seq_len=seq_len, micro_batch=micro_batch, device=device,
                            torch_version=torch.__version__, rows=tuple(rows), notes=tuple(notes))
