"""JSON output: one object, sorted keys, raw base units (bytes, counts), no formatted strings
except the texts that explain (inequality, rank_reason). Schema in README.md."""
import json

from fitplan import __version__
from fitplan.counts.params import num_params, shape_params
from fitplan.memory.breakdown import PARTS
from fitplan.report.sentences import inequality, monitor, reasons


def dump(obj) -> str:
    """Every JSON document fitplan prints: sorted keys, and never NaN or Infinity (not JSON):
    a non-finite number is a bug, raised here rather than printed."""
    return json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n"


def _common(setup) -> dict:
    m, t, c = setup.model, setup.training, setup.cluster
    return {
        "fitplan_version": __version__,
        "model": {"name": m.name, "num_params": num_params(m), "shape_params": shape_params(m),
                  "num_layers": m.num_layers, "hidden_size": m.hidden_size, "num_heads": m.num_heads,
                  "num_kv_heads": m.num_kv_heads, "ffn_hidden_size": m.ffn_hidden_size, "vocab_size": m.vocab_size},
        "training": {"seq_len": t.seq_len, "global_batch": t.global_batch, "precision": t.recipe.name,
                     "act_bytes": t.act_bytes, "dropout": t.dropout, "attention_kernel": t.attention_kernel,
                     "finetune": finetune_dict(t)},
        "cluster": {"gpu": c.gpu.name, "num_gpus": c.num_gpus, "gpus_per_node": c.gpus_per_node,
                    "memory_bytes_per_gpu": c.gpu.memory_bytes, "reserve_bytes_per_gpu": c.reserve_bytes,
                    "host_memory_bytes_per_node": c.host_memory_bytes},
        "usable_bytes_per_gpu": c.usable_bytes,
        "assumed": list(setup.assumed),
    }


def finetune_dict(t) -> dict:
    """The fine-tuning mode: full, or the adapters' rank and targets and the frozen base's precision."""
    if t.finetune == "full":
        return {"mode": "full"}
    from fitplan.memory.finetune import base_precision
    return {"mode": t.finetune, "lora_rank": t.lora_rank, "lora_targets": t.lora_targets.split(","),
            "base_precision": base_precision(t)}


def host_dict(b) -> dict:
    """What an offloading layout holds off the GPU: per GPU by part, per node, and the limit."""
    return {"parts_per_gpu": {k: int(v) for k, v in b.host.items()}, "bytes_per_node": int(b.host_per_node_bytes),
            "nvme_bytes_per_node": int(b.nvme_per_node_bytes), "limit_bytes_per_node": b.host_limit_bytes,
            "fits": b.host_fits}


def config_dict(c) -> dict:
    return {"tp": c.tp, "pp": c.pp, "dp": c.dp, "cp": c.cp, "ep": c.ep, "zero": int(c.zero),
            "sequence_parallel": c.sequence_parallel, "recompute": c.recompute.value,
            "micro_batch": c.micro_batch, "virtual_stages": c.virtual_stages, "schedule": c.schedule.value,
            "first_stage_layers": c.first_stage_layers, "last_stage_layers": c.last_stage_layers,
            "shard_degree": c.shard_degree, "reshard_after_forward": c.reshard_after_forward,
            "recompute_num_layers": c.recompute_num_layers, "recompute_method": c.recompute_method.value,
            **overlap_dict(c), "offload": c.offload.value}


def overlap_dict(c) -> dict:
    """The overlaps the time model assumed, defaults resolved (docs/formulas.md#overlap)."""
    from fitplan.specs.parallel import overlaps_ep_comm, overlaps_param_gather
    return {"overlap_grad_reduce": bool(c.overlap_grad_reduce), "overlap_param_gather": overlaps_param_gather(c),
            "tp_comm_overlap": bool(c.tp_comm_overlap), "cp_comm_overlap": bool(c.cp_comm_overlap),
            "ep_comm_overlap": overlaps_ep_comm(c)}


def _stages(b) -> dict:
    """Layers per pipeline stage (summing to the model's), and the busiest stage's index."""
    return {"stage_layers": list(b.stage_layers), "busiest_stage": b.stage_index}


def peak_dict(b) -> dict:
    """Where the step's peak is and what it holds: bytes, stage, phase, held (bytes by term)."""
    from fitplan.memory.timeline import allocated_bytes, reserved_bytes
    return {"bytes": int(b.per_gpu_bytes), "allocated_bytes": int(allocated_bytes(b.peak.held)),
            "reserved_bytes": int(reserved_bytes(b.peak.held)), "stage": b.stage, "stage_index": b.stage_index,
            "phase": b.peak.phase, "held": {k: int(b.peak.held.get(k, 0)) for k in PARTS}}


def risk_dict(b) -> dict:
    """The verdict (level: fits_with_margin, tight or likely_oom) and the rule that decided it."""
    from fitplan.analysis import risk
    r = risk(b)
    return {"level": r.level, "rule": r.rule, "peak_fraction_of_capacity": r.fraction, "limit_bytes": r.limit_bytes,
            "band_bytes": list(r.band_bytes)}


def timeline_list(setup, b) -> list:
    """The busiest rank's events: phase, bytes, the steady state's repeat count, bytes by group."""
    from fitplan.memory.events import stage_timeline
    return [{"phase": e.phase, "bytes": e.bytes, "repeat": e.repeat, "by_group": e.by_group()}
            for e in stage_timeline(setup, b)]


def breakdown_dict(b) -> dict:
    return {"config": config_dict(b.config), "stage": b.stage, **_stages(b),
            "breakdown": {**{k: int(b.parts[k]) for k in PARTS}, "reserve": b.reserve_bytes},
            "state_bytes": int(b.state_bytes), "activation_bytes": int(b.activation_bytes),
            "per_gpu_bytes": int(b.per_gpu_bytes), "headroom_bytes": int(b.headroom_bytes), "fits": b.fits,
            "host": host_dict(b), "peak": peak_dict(b), "risk": risk_dict(b)}


def to_train_dict(setup, st) -> dict:
    """The `to_train` object of one plan: tokens, days, gpu_hours, energy_mwh, cost (null
    where not known: no step time, no power figure, no price). Only with --train-tokens."""
    from fitplan.timing.to_train import to_train
    t = to_train(setup, st)
    out = {"tokens": t.tokens, "days": t.days, "gpu_hours": t.gpu_hours, "energy_mwh": t.energy_mwh, "cost": t.cost,
           "uncertainty": None}
    band = None if st is None else st.uncertainty
    if band is not None and t.days is not None:   # each is proportional to the step time: the step's band
        lo, hi = band.low_s / st.step_time_s, band.high_s / st.step_time_s
        out["uncertainty"] = {k: None if out[k] is None else [out[k] * lo, out[k] * hi]
                              for k in ("days", "gpu_hours", "energy_mwh", "cost")}
        out["uncertainty"]["coverage"] = band.coverage
    return out


def _with_to_train(setup, item: dict, st) -> dict:
    """item, with `to_train` when --train-tokens is given; st: the step, or a function giving it."""
    if setup.training.train_tokens is not None:
        item["to_train"] = to_train_dict(setup, st() if callable(st) else st)
    return item


def seed(a) -> str:
    out = _common(a.setup)
    out["state"] = {"bytes_per_param": a.bytes_per_param, "total_bytes": a.state_total_bytes,
                    "gpus_of_pure_state": a.gpus_of_pure_state}
    out["activations"] = {"attention_factor": a.attention_factor.value, "per_layer_bytes": a.per_layer.value,
                          "all_layers_bytes": a.all_layers_bytes, "bigger_problem": a.bigger_problem}
    from fitplan.report.advice import legal_step
    out["strategies"] = [_with_to_train(a.setup, {
        "name": s.name, "state_bytes": int(s.breakdown.state_bytes),
        "activation_bytes": int(s.breakdown.activation_bytes), "per_gpu_bytes": int(s.breakdown.per_gpu_bytes),
        "fits": s.breakdown.fits,
        "blocking_term": None if s.blocking is None else {
            "name": s.blocking.name, "bytes": int(s.blocking.bytes), "formula": s.blocking.formula,
            "alone_exceeds": s.blocking.alone_exceeds},
    }, lambda s=s: legal_step(a.setup, s.breakdown.config)) for s in a.strategies]
    return dump(out)


def breakdown(setup, b) -> str:
    from fitplan.report.advice import steps
    st = (steps(setup, [b]) or [None])[0]
    out = {**_common(setup), **breakdown_dict(b), "timeline": timeline_list(setup, b)}
    if st is not None:
        out.update(time={**time_dict(st), "per_layer": per_layer_dict(setup, b.config)}, comm=comm_dict(st))
    return dump(_with_to_train(setup, out, st))


def per_layer_dict(setup, config) -> dict:
    """`time.per_layer`: every pipeline stage's average layer, one micro-batch, in seconds
    (fitplan.timing.breakdown.per_layer; docs/formulas.md#per-layer)."""
    from fitplan.timing.breakdown import PER_LAYER_AXES, per_layer
    return {"stages": [{
        "stage": st.stage, "layers": st.layers, "dense_layers": st.dense_layers, "paces": st.paces,
        "forward_s": st.forward_s, "backward_s": st.backward_s, "recompute_s": st.recompute_s,
        "comm": {a: {"busy_s": st.comm[a][0], "exposed_s": st.comm[a][1]} for a in PER_LAYER_AXES},
        "microbatch_forward_s": st.microbatch_forward_s, "microbatch_backward_s": st.microbatch_backward_s,
        "exposed_s": dict(st.exposed_s)} for st in per_layer(setup, config)],
        "unit": "seconds per layer and micro-batch (pp: per micro-batch; dp without ZeRO-3: the step's "
                "reductions spread over the layers and micro-batches); exposed_s: the stage's per step"}


def compare(setup, cmp) -> str:
    layouts = []
    for l in cmp.layouts:
        item = {"name": l.name, "config": config_dict(l.config), "problem": l.problem or None}
        if not l.problem:
            item.update(simplified_state_bytes=int(l.simplified_state_bytes), state_bytes=int(l.state_bytes),
                        stored_activation_bytes={rc.value: int(b) for rc, b in l.stored_by_recompute},
                        per_gpu_bytes=int(l.memory.per_gpu_bytes), fits=l.fits, time=time_dict(l.step),
                        comm=comm_dict(l.step))
        layouts.append(item)
    return dump({**_common(setup), "layouts": layouts,
                  "preferred": cmp.preferred.name if cmp.preferred else None, "reasons": list(reasons(cmp)),
                  "monitor": [{"metric": m, "expected": v, "unit": u, "catches": w} for m, v, u, w in monitor(cmp)]})


def time_dict(st) -> dict:
    """Issue 4's `time` object: step_s, compute_s, exposed_comm_s by axis, bubble_s, tokens_per_s, mfu, hfu."""
    return {"step_s": st.step_time_s, "compute_s": float(st.parts["time/compute"]),
            "exposed_comm_s": {a: float(s) for a, s in st.exposed_comm_s.items()},
            "bubble_s": float(st.parts["time/bubble"]), "tokens_per_s": st.tokens_per_s, "mfu": st.mfu,
            "mfu_causal": st.mfu_causal,
            "hfu": st.hfu, "tflops_per_gpu": st.tflops_per_gpu, "num_microbatches": int(st.num_microbatches),
            "bubble_fraction": st.bubble_fraction, "slowest_stage": st.slowest_stage,
            "parts_s": {k: float(v) for k, v in st.parts.items()}, "uncertainty": uncertainty_dict(st.uncertainty)}


def uncertainty_dict(band) -> dict | None:
    """`time.uncertainty`: the 80% band around the step (fitplan.timing.uncertainty), null without a fit."""
    if band is None:
        return None
    return {"low_s": band.low_s, "high_s": band.high_s, "coverage": band.coverage, "basis": band.basis}


def comm_dict(st) -> dict:
    """Issue 4's `comm` object: bytes per step per GPU by axis, with the link tier, the nodes one
    group spans, and the seconds the traffic holds its link (busy_s) of which exposed_s shows."""
    return {a: {"degree": c.degree, "bytes_per_step": float(c.bytes_per_step), "intra_node": c.intra_node,
                "link": c.link, "nodes": c.nodes, "busy_s": float(c.busy_s)} for a, c in st.comm.items()}


def search(setup, r, bound, smallest) -> str:
    from fitplan.report.advice import steps
    from fitplan.search import RECOMMEND_ORDER

    def one(s, st):
        return _with_to_train(setup, {
            **config_dict(s.config), **_stages(s.breakdown),
            "largest_fitting_micro_batch": s.exact.largest_micro_batch,
            "per_gpu_bytes": int(s.breakdown.per_gpu_bytes), "host": host_dict(s.breakdown),
            "headroom_bytes": int(s.breakdown.headroom_bytes), "rank_reason": s.rank_reason,
            "peak": peak_dict(s.breakdown), "risk": risk_dict(s.breakdown),
            "time": None if st is None else time_dict(st), "comm": None if st is None else comm_dict(st)}, st)

    def alone(s):
        if s is None:
            return None
        return {**one(s, (steps(setup, [s]) or [None])[0]), "timeline": timeline_list(setup, s.breakdown)}

    step_list = steps(setup, r.suggestions) or [None] * len(r.suggestions)
    suggestions = [one(s, st) for s, st in zip(r.suggestions, step_list)]
    lower = {"min_gpus": bound.min_gpus, "min_gpus_power_of_two": bound.min_gpus_power_of_two,
             "inequality": inequality(bound), "per_gpu_bytes": bound.per_gpu_bytes, "excludes": bound.excludes}
    if smallest:
        lower["smallest_fitting_gpus"] = smallest["general"]
        lower["smallest_fitting_gpus_power_of_two"] = smallest["power_of_two"]
    least = r.least_loaded
    least_dict = None if least is None else {**config_dict(least.config), "per_gpu_bytes": int(least.per_gpu_bytes),
                                             "headroom_bytes": int(least.headroom_bytes)}
    return dump({**_common(setup), "feasible": r.feasible, "lower_bound": lower, "suggestions": suggestions,
                  "least_loaded": least_dict,
                  "recommended": alone(r.recommended), "minimum_viable": alone(r.minimum_viable),
                  "recommend_order": RECOMMEND_ORDER, "recommend_note": r.recommend_note or None,
                  "rank_order": r.rank_order,
                  "candidates": {"considered": r.considered, "rejected_by_reason": r.rejected_by_reason,
                                 "fit": r.fit}})
