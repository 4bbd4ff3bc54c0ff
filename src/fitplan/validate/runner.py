"""run_validation's body: every check, as rows of a ValidationReport. Imports torch."""
import torch

from fitplan.counts.params import shape_params
from fitplan.errors import SpecError
from fitplan.memory.breakdown import evaluate
from fitplan.specs import ModelSpec, ParallelConfig, Recompute
from fitplan.specs.parallel import SEARCHED_RECOMPUTE   # the LoRA rows: the three modes its reference runs
from fitplan.validate import distributed as D
from fitplan.validate import expected as X
from fitplan.validate.measure import count_flops, count_params, cuda_peak, saved_activations
from fitplan.validate.reference_model import IMPLEMENTED_RECOMPUTE, MOE_RECOMPUTE, is_moe_layer
from fitplan.validate.report import Row, ValidationReport

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


def distributed_rows(model: ModelSpec, *, seq_len: int, micro_batch: int, world: int) -> tuple[list[Row], list[str]]:
    records = D.measure_distributed([model], seq_len=seq_len, micro_batch=micro_batch, world_size=world)
    rows = D.state_rows(model, records, seq_len=seq_len, world=world)
    rows += D.tp_activation_rows(model, records, seq_len=seq_len, micro_batch=micro_batch, world=world)
    rows += D.pp_activation_rows(model, records, seq_len=seq_len, micro_batch=micro_batch, world=world)
    notes = [f"world {world}: skipped {reason}" for check in D.CHECKS
             if (reason := D.skip_reason(check, model, world=world, seq_len=seq_len))]
    return rows, notes


def cuda_rows(model: ModelSpec, *, seq_len: int, micro_batch: int) -> list[Row]:
    """Peak allocated over two fp32 Adam steps vs the planner's per-GPU total (fp32-adam,
    act_bytes 4, no reserve): reported with its gap, not judged."""
    got = cuda_peak(model, seq_len=seq_len, micro_batch=micro_batch, recompute=Recompute.NONE)
    setup = X.setup_for(model, seq_len=seq_len, act_bytes=4)
    breakdown = evaluate(setup, ParallelConfig(micro_batch=micro_batch))
    section = f"cuda peak ({got['device_name']}, fp32, two Adam steps)"
    states = {k: breakdown.parts[v] for k, v in (("params", "states/weights"), ("grads", "states/grads"))}
    states["optimizer"] = breakdown.parts["states/master"] + breakdown.parts["states/optimizer"]
    rows = [Row(section=section, quantity=f"{k} (cuda tensors)", planner=v, measured=got[k]) for k, v in states.items()]
    gap = got["max_allocated"] - breakdown.per_gpu_bytes
    rows.append(Row(section=section, quantity="torch.cuda.max_memory_allocated", planner=breakdown.per_gpu_bytes,
                    measured=got["max_allocated"], relation="info",
                    note=f"gap {gap:+,} B: transient gradients of the logits and softmax, the cuBLAS workspace, "
                         "512-byte allocator rounding; the planner's states + activations are the rows above"))
    rows.append(Row(section=section, quantity="reserved_bytes.all.peak", planner=breakdown.per_gpu_bytes,
                    measured=got["max_reserved"], relation="info",
                    note="the caching allocator's segments: what cluster.reserve_bytes must cover beyond the peak"))
    return rows


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


def run(*, model: ModelSpec, seq_len: int, micro_batch: int, world_sizes, device: str,
        include_distributed: bool) -> ValidationReport:
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecError("--device cuda: no CUDA device here; run on a machine with a GPU, or use --device cpu")
    rows = params_rows(model) + activation_rows(model, seq_len=seq_len, micro_batch=micro_batch)
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
