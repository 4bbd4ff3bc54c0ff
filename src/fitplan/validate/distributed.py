"""Distributed model states (and TP and pipeline activations) on CPU: gloo, N local processes.

One spawn runs every check for every model (torch.multiprocessing, a file store, no
torchrun). Each rank measures after one optimizer step the bytes of the unique storages
of its local parameters, gradients and optimizer state (a DTensor by its local shard):

  ddp          DistributedDataParallel(gradient_as_bucket_view=True): the grads are the
               reducer's buckets, so no second gradient copy exists
  zero1        DDP + torch.distributed.optim.ZeroRedundancyOptimizer(Adam)
  fsdp2-zero2  fully_shard(reshard_after_forward=False) on every block and the root
  fsdp2-zero3  fully_shard(reshard_after_forward=True) on every block and the root (set
               explicitly: the default leaves the root unsharded after forward)
  tp           DTensor ColwiseParallel / RowwiseParallel: q, k, v, fc1 (gate, up) column-,
               o, fc2 (down) row-wise; vocabulary-parallel embedding (and head)
  pp           torch.distributed.pipelining: one stage per rank, ScheduleGPipe, 2 micro-batches
  ep           MoE models: dp = ep = N, each rank holds E/N experts of every MoE layer
               (reference_moe.MoeMlp with the world as its ep group: all_to_all_single
               dispatch and combine); DDP over the dense parameters only, the experts'
               expert-data-parallel group (tp*dp*cp/ep = 1 rank) needs no reduction
  tp-act       one block, bf16, tensor parallel with and without DTensor sequence parallel
               (torchtitan's plan), bytes saved for backward per rank for each recompute mode
  pp-act       dense models with L = 2N + 1 layers on counts.stages.split (uneven stages),
               bf16, ScheduleGPipe and Schedule1F1B with 4 micro-batches: each rank's peak
               of live saved-for-backward bytes over one step (measure.LiveSavedRecorder)
  ddp-buckets  live tensor bytes (fitplan.validate.peak) after DDP's backward beyond the
               parameters, with and without gradient_as_bucket_view: the reducer's buckets
  fsdp2-buffers  the same model and batch once without FSDP and once with torchtitan's FSDP2
               wrapping (the embedding, each block, [norm, head], the root); the difference of
               live bytes at each layer's forward and over the layers' backward is FSDP's
               gathered units and unsharded gradients
  fsdp2-nosync  one backward with FSDP2's gradient sync and resharding after backward off, as
               torch.distributed.pipelining runs every micro-batch but the last: the unsharded
               parameters kept and the unsharded gradients accumulated, by storage
  fsdp2-qlora  dense models: the LoRA reference with an NF4 base (reference_lora.quantize_base,
               FSDP-QLoRA's layout), the same backward as fsdp2-nosync: each unit's gathered
               parameters (the packed base, not bf16) and unsharded gradients (adapters only)

The rows compare each figure with the planner (fitplan.memory.breakdown.stage_memory for
the same ParallelConfig, recipe fp32-adam) plus the engine's named extras
(fitplan.validate.expected).
"""
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from fitplan.specs import ModelSpec, ParallelConfig, Recompute, ZeroStage
from fitplan.specs.model import Mlp
from fitplan.validate import expected as X
from fitplan.validate.measure import (LiveSavedRecorder, SavedTensorRecorder, add_sac_saved, local_tensor,
                                     param_storages, storage_key)
from fitplan.validate.reference_model import (DEFAULT_DROPOUT, IMPLEMENTED_RECOMPUTE, Block, build, embed_tokens,
                                               lm_loss)
from fitplan.validate.report import Extra, Row

STATE_CHECKS = ("ddp", "zero1", "fsdp2-zero2", "fsdp2-zero3", "tp", "pp", "ep")
RUNTIME_CHECKS = ("ddp-buckets", "fsdp2-buffers", "fsdp2-nosync")
QLORA = (4, "qkv,o,mlp")   # the fsdp2-qlora check's adapter rank and targets (as the one-process LoRA rows)
CHECKS = STATE_CHECKS + ("tp-act", "pp-act") + RUNTIME_CHECKS + ("fsdp2-qlora",)
ACT_BYTES = 2     # tp-act runs in bf16
LR = 1e-3


# ---------------------------------------------------------------- spawning

def measure_distributed(models: list[ModelSpec], *, seq_len: int, micro_batch: int, world_size: int,
                        checks=CHECKS, timeout_s: int = 120) -> list[dict]:
    """Start world_size gloo ranks once (plain subprocesses of this interpreter, joined by
    a file store: no torchrun, and no re-import of the caller's __main__ as spawn does);
    every check for every model; the records of all ranks."""
    with tempfile.TemporaryDirectory(prefix="fitplan-validate-") as tmp:
        job = {"init_file": os.path.join(tmp, "store"), "out_file": os.path.join(tmp, "records.json"),
               "world": world_size, "models": list(models), "seq_len": seq_len, "micro_batch": micro_batch,
               "checks": tuple(checks), "timeout_s": timeout_s}
        job_file = os.path.join(tmp, "job.pkl")
        with open(job_file, "wb") as fh:
            pickle.dump(job, fh)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), OMP_NUM_THREADS="1")
        logs = [os.path.join(tmp, f"rank{r}.log") for r in range(world_size)]
        procs = []
        for rank, log in enumerate(logs):
            with open(log, "w") as fh:
                procs.append(subprocess.Popen([sys.executable, "-m", "fitplan.validate.distributed", job_file,
                                               str(rank)], env=env, stdout=fh, stderr=subprocess.STDOUT))
        failed = _wait_all(procs, timeout_s * max(1, len(models)) * 2)
        if failed:
            tails = []
            for rank in failed:
                with open(logs[rank]) as fh:
                    tails.append(f"--- rank {rank} ---\n" + fh.read()[-4000:])
            raise RuntimeError(f"distributed validation failed on ranks {failed}:\n" + "\n".join(tails))
        with open(job["out_file"]) as fh:
            return json.load(fh)


def _wait_all(procs, timeout_s: float) -> list[int]:
    """Wait for every rank; on the first failure (or the deadline) stop the others."""
    deadline = time.monotonic() + timeout_s
    failed = []
    while any(p.poll() is None for p in procs):
        failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
        if failed or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for rank, p in enumerate(procs):
        if p.poll() is None:
            p.kill()
            p.wait()
            failed.append(rank)
    return sorted(set(failed + [r for r, p in enumerate(procs) if p.returncode != 0]))


def _main(argv: list[str]) -> None:
    """One rank. It leaves through os._exit: letting the interpreter finalize after gloo and
    DTensor work sometimes aborts in a C++ destructor ("terminate called without an active
    exception", about 1 run in 10 on 2 cores), after every measurement is already written."""
    code = 1
    try:
        with open(argv[0], "rb") as fh:
            job = pickle.load(fh)
        _worker(int(argv[1]), **job)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _worker(rank, *, world, init_file, out_file, models, seq_len, micro_batch, checks, timeout_s):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
    records = []
    try:
        for spec in models:
            for check in checks:
                if skip_reason(check, spec, world=world, seq_len=seq_len):
                    continue
                torch.manual_seed(0)
                start = time.perf_counter()
                measured = _CHECKS[check](spec, rank=rank, world=world, seq_len=seq_len, b=micro_batch)
                records.append({"check": check, "model": spec.name, "rank": rank, **measured,
                                "seconds": round(time.perf_counter() - start, 3)})
                dist.barrier()
        gathered = [None] * world
        dist.all_gather_object(gathered, records)
        if rank == 0:
            with open(out_file + ".part", "w") as fh:
                json.dump([r for part in gathered for r in part], fh)
            os.replace(out_file + ".part", out_file)
    finally:
        dist.destroy_process_group()


def skip_reason(check: str, spec: ModelSpec, *, world: int, seq_len: int) -> str | None:
    """Why a check cannot run for this model and world size (None: it can)."""
    if check == "pp" and spec.num_layers % world:
        return f"pp: {spec.num_layers} layers do not split into {world} equal stages"
    if check == "ep":
        if spec.moe is None:
            return "ep: a dense model has no experts"
        if spec.moe.num_experts % world:
            return f"ep: {spec.moe.num_experts} experts do not split over ep={world}"
    if check == "fsdp2-qlora" and spec.moe is not None:
        return "fsdp2-qlora: adapters on mixture-of-experts layers are not modelled"
    if check == "pp-act" and spec.moe is not None:
        return "pp-act: pipeline activations are checked on dense models"
    if check in ("tp", "tp-act") and spec.moe is not None:
        return (f"{check}: no tensor-parallel plan for MoE layers (Megatron-LM needs sequence parallel and an "
                f"expert-tensor-parallel choice there); the reference splits only dense layers")
    if check in ("tp", "tp-act"):
        sizes = {"heads": spec.num_heads, "kv heads": spec.num_kv_heads, "ffn size": spec.ffn_hidden_size,
                 "vocabulary": spec.vocab_size}
        if check == "tp-act":
            sizes["sequence length (sp)"] = seq_len
        bad = [f"{k} {v}" for k, v in sizes.items() if v % world]
        if bad:
            return f"{check}: not divisible by t={world}: {', '.join(bad)}"
    return None


# ---------------------------------------------------------------- measuring one rank

def _batch(spec: ModelSpec, n: int, seq_len: int):
    g = torch.Generator().manual_seed(1)   # the same tokens on every rank (tp needs them equal)
    ids = torch.randint(0, spec.vocab_size, (n, seq_len), generator=g)
    return ids, torch.randint(0, spec.vocab_size, (n, seq_len), generator=g)


def unique_bytes(tensors) -> int:
    seen = {}
    for t in tensors:
        if t is not None:
            ptr, nbytes = storage_key(t)
            seen.setdefault(ptr, nbytes)
    return sum(v for k, v in seen.items() if k)


def _states(params, state: dict) -> dict:
    params = list(params)
    values = [v for st in state.values() for v in st.values() if torch.is_tensor(v)]
    return {"params": unique_bytes(params), "grads": unique_bytes(p.grad for p in params),
            "optimizer": unique_bytes(values), "state_tensors": len(state)}


def _ddp(spec, *, rank, world, seq_len, b):
    from torch.nn.parallel import DistributedDataParallel as DDP

    net = build(spec)
    model = DDP(net, gradient_as_bucket_view=True)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    ids, targets = _batch(spec, b, seq_len)
    lm_loss(model(ids), targets).backward()
    opt.step()
    return _states(net.parameters(), opt.state)


def _zero1(spec, *, rank, world, seq_len, b):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    net = build(spec)
    model = DDP(net, gradient_as_bucket_view=True)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=LR)
    ids, targets = _batch(spec, b, seq_len)
    lm_loss(model(ids), targets).backward()
    opt.step()
    return _states(net.parameters(), opt.optim.state)


def _fsdp2(spec, *, rank, world, seq_len, b, reshard: bool):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    net = build(spec)
    mesh = init_device_mesh("cpu", (world,))
    for layer in net.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(net, mesh=mesh, reshard_after_forward=reshard)
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    sharded = list(net.parameters())
    ids, targets = _batch(spec, b, seq_len)
    logits = net(ids)
    held = unique_bytes(sharded + list(net.parameters()))   # sharded copies + whatever is unsharded now
    lm_loss(logits, targets).backward()
    opt.step()
    return {**_states(net.parameters(), opt.state), "params_fwd_bwd": held}


def tp_plan(spec: ModelSpec, *, prefix: str = "", sp: bool = False) -> dict:
    """One block: Megatron's split with DTensor styles; with sp, torchtitan's sequence-parallel plan."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)

    col = ColwiseParallel()
    row = RowwiseParallel(output_layouts=Shard(1)) if sp else RowwiseParallel()
    mlp_in, mlp_out = (("gate", "up"), "down") if spec.mlp is Mlp.SWIGLU else (("fc1",), "fc2")
    plan = {f"{prefix}attn.{n}": col for n in ("q_proj", "k_proj", "v_proj")}
    plan[f"{prefix}attn.o_proj"] = row
    plan.update({f"{prefix}mlp.{n}": col for n in mlp_in})
    plan[f"{prefix}mlp.{mlp_out}"] = row
    if sp:
        gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        plan.update({f"{prefix}norm1": SequenceParallel(), f"{prefix}norm2": SequenceParallel(),
                     f"{prefix}attn": gather, f"{prefix}mlp": gather})
    return plan


def model_tp_plan(spec: ModelSpec) -> dict:
    """Every block, plus the vocabulary-parallel embedding and (untied) head; the learned
    positions and the norms stay replicated, as the planner's TP split assumes."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {"embed": RowwiseParallel(input_layouts=Replicate())}
    if not spec.tied_embeddings:
        plan["head"] = ColwiseParallel(output_layouts=Replicate())
    for i in range(spec.num_layers):
        plan.update(tp_plan(spec, prefix=f"layers.{i}."))
    return plan


def _tp(spec, *, rank, world, seq_len, b):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    net = build(spec)
    mesh = init_device_mesh("cpu", (world,))
    parallelize_module(net, mesh, model_tp_plan(spec))
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    ids, targets = _batch(spec, b, seq_len)
    lm_loss(net(ids), targets).backward()
    opt.step()
    return _states(net.parameters(), opt.state)


class PipeStage(nn.Module):
    """Rank r of p: layers [r*L/p, (r+1)*L/p), or layers = (start, stop); the first adds the
    embedding (and learned positions), the last the final norm and the head; with tied
    embeddings the last stage holds its own copy of the embedding matrix as the head
    (Megatron-LM)."""

    def __init__(self, net, spec: ModelSpec, rank: int, world: int, layers: tuple[int, int] | None = None):
        super().__init__()
        per = spec.num_layers // world
        start, stop = layers if layers is not None else (rank * per, (rank + 1) * per)
        self.first, self.last, self.p = rank == 0, rank == world - 1, net.p
        self.embed = net.embed if self.first else None
        self.pos = net.pos if self.first else None
        self.layers = nn.ModuleList(net.layers[start:stop])
        self.norm = net.norm if self.last else None
        self.head = None
        if self.last:
            self.head = net.head
            if self.head is None:
                w = net.embed.weight
                self.head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False, device=w.device, dtype=w.dtype)
                with torch.no_grad():
                    self.head.weight.copy_(w)

    def forward(self, x):
        if self.first:
            x = embed_tokens(self.embed, self.pos, x, self.p, self.training)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)) if self.last else x


def _pp(spec, *, rank, world, seq_len, b):
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    stage_mod = PipeStage(build(spec), spec, rank, world)
    stage = PipelineStage(stage_mod, stage_index=rank, num_stages=world, device=torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=2, loss_fn=lm_loss)
    ids, targets = _batch(spec, 2 * b, seq_len)
    if rank == 0:
        schedule.step(ids)
    elif rank == world - 1:
        schedule.step(target=targets, losses=[])
    else:
        schedule.step()
    opt = torch.optim.Adam(stage_mod.parameters(), lr=LR)
    opt.step()
    return _states(stage_mod.parameters(), opt.state)


PP_MICROBATCHES = 4
PP_SCHEDULES = ("gpipe", "1f1b")


def pp_act_model(spec: ModelSpec, world: int) -> ModelSpec:
    """The model the pipeline-activation check runs: spec with L = 2p + 1 layers, so that
    fitplan.counts.stages.split gives uneven stages (5 on 2 stages: 2, 3)."""
    from dataclasses import replace

    return replace(spec, num_layers=2 * world + 1)


def _pp_act(spec, *, rank, world, seq_len, b):
    """Peak bytes saved for backward on this pipeline rank over one step of m micro-batches,
    bf16, no recompute, for ScheduleGPipe and Schedule1F1B, on the planner's uneven split."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from fitplan.counts.stages import split

    model = pp_act_model(spec, world)
    sizes = split(model.num_layers, world)
    start = sum(sizes[:rank])
    out = {"layers": sizes[rank]}
    for name, cls in zip(PP_SCHEDULES, (ScheduleGPipe, Schedule1F1B)):
        torch.manual_seed(0)
        net = build(model, dtype=torch.bfloat16).train()
        stage_mod = PipeStage(net, model, rank, world, layers=(start, start + sizes[rank]))
        stage = PipelineStage(stage_mod, stage_index=rank, num_stages=world, device=torch.device("cpu"))
        schedule = cls(stage, n_microbatches=PP_MICROBATCHES, loss_fn=lm_loss)
        ids, targets = _batch(model, PP_MICROBATCHES * b, seq_len)

        def step():
            if rank == 0:
                schedule.step(ids)
            elif rank == world - 1:
                schedule.step(target=targets, losses=[])
            else:
                schedule.step()

        # The first step also runs torch's metadata inference, one forward (and on the stages
        # after the first a backward) outside the schedule: measure the second.
        step()
        recorder = LiveSavedRecorder(param_storages(stage_mod))
        with torch.autograd.graph.saved_tensors_hooks(recorder.pack, recorder.unpack):
            step()
        out[name] = recorder.peak
        out[f"{name}_left"] = recorder.live   # 0: every micro-batch's saved tensors were released
    return out


def _ep(spec, *, rank, world, seq_len, b):
    """dp = ep = world: this rank's E/ep experts, DDP over the rest; each rank its own tokens."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    net = build(spec, ep_group=dist.group.WORLD)
    experts = [name for name, _ in net.named_parameters() if ".mlp.experts." in name]
    DDP._set_params_and_buffers_to_ignore_for_model(net, experts)   # torch's hook for params DDP must not reduce
    model = DDP(net, gradient_as_bucket_view=True)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(100 + rank)   # data parallel: different tokens per rank
    ids = torch.randint(0, spec.vocab_size, (b, seq_len), generator=g)
    targets = torch.randint(0, spec.vocab_size, (b, seq_len), generator=g)
    lm_loss(model(ids), targets).backward()
    opt.step()
    loads = [list(layer.mlp.tokens_per_expert) for layer in net.layers if hasattr(layer.mlp, "tokens_per_expert")]
    return {**_states(net.parameters(), opt.state), "expert_tokens": loads}


def _tp_act(spec, *, rank, world, seq_len, b):
    """Bytes one tensor-parallel block saves per rank, bf16, for tp and tp+sp and each mode."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    out, tensors = {}, {}
    for sp in (False, True):
        for recompute in IMPLEMENTED_RECOMPUTE:
            torch.manual_seed(0)
            block = Block(spec, DEFAULT_DROPOUT, recompute).to(torch.bfloat16).train()
            parallelize_module(block, mesh, tp_plan(spec, sp=sp))
            s_local = seq_len // world if sp else seq_len
            x = torch.randn(b, s_local, spec.hidden_size, dtype=torch.bfloat16, requires_grad=True)
            recorder = SavedTensorRecorder(param_storages(block))
            recorder.current = 0
            with torch.autograd.graph.saved_tensors_hooks(recorder.pack, recorder.unpack):
                y = block(x)
            add_sac_saved(recorder, [block])
            out[f"{'sp' if sp else 'tp'}/{recompute.value}"] = recorder.bytes(0)
            tensors[f"{'sp' if sp else 'tp'}/{recompute.value}"] = recorder.tensors(0)
            local_tensor(y).float().sum().backward()
    return {"act": out, "act_tensors": tensors}


def _ddp_buckets(spec, *, rank, world, seq_len, b):
    """Live bytes beyond the parameters after one DDP backward: the gradients and DDP's buckets
    (the batch too), with gradient_as_bucket_view on and off."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fitplan.validate.peak import LiveBytes
    out = {}
    for view in (True, False):
        torch.manual_seed(0)
        net = build(spec)
        live = LiveBytes()
        live.add_all(net.parameters())
        live.base = live.now()
        with live:
            model = DDP(net, gradient_as_bucket_view=view)
            ids, targets = _batch(spec, b, seq_len)
            loss = lm_loss(model(ids), targets)
            loss.backward()
            del loss
            out["view" if view else "copy"] = live.settled()
        del model, net
    return out


def _fsdp2_buffers(spec, *, rank, world, seq_len, b):
    """The same step without and with FSDP2 (torchtitan's wrapping): live bytes beyond each run's
    states at each layer's forward and the layers' backward peak."""
    return {"single": _step_trace(spec, None, seq_len=seq_len, b=b),
            "fsdp": _step_trace(spec, world, seq_len=seq_len, b=b)}


def _step_trace(spec, world, *, seq_len, b):
    from fitplan.validate.peak import LiveBytes, mark_head_done, states_of
    torch.manual_seed(0)
    net = build(spec)
    units = []
    if world is not None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        units = [net.embed, *net.layers]
        fully_shard(net.embed, mesh=mesh, reshard_after_forward=True)
        for layer in net.layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=True)
        if net.head is not None:   # torchtitan's apply_fsdp: [norm, output] kept gathered after forward
            fully_shard([net.norm, net.head], mesh=mesh, reshard_after_forward=False)
            units.append(net.norm)
        fully_shard(net, mesh=mesh)
        units.append(net)
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    ids, targets = _batch(spec, b, seq_len)
    lm_loss(net(ids), targets).backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    live = LiveBytes()
    for unit in units:   # FSDP2 frees and refills its unsharded parameters' storages in place
        group = getattr(unit._get_fsdp_state(), "_fsdp_param_group", None)
        for fp in (group.fsdp_params if group is not None else ()):
            live.add_all(t for t in (getattr(fp, "_unsharded_param", None), getattr(fp, "_sharded_param_data", None))
                         if torch.is_tensor(t))
    live.add_all(states_of(net, opt))
    live.base = live.now()
    live.add_all((ids, targets))
    at = []
    hooks = [layer.register_forward_pre_hook(lambda m, a: at.append(live.settled())) for layer in net.layers]
    mark_head_done(net, live)
    with live:
        live.mark("forward")
        logits = net(ids)
        loss = lm_loss(logits, targets)
        del logits
        live.mark("loss backward")
        loss.backward()
        del loss
    for h in hooks:
        h.remove()
    return {"layer_forward": at, "layers_backward": live.peaks["layers backward"]}


def _fsdp2_nosync(spec, *, rank, world, seq_len, b):
    """One backward as torch.distributed.pipelining's stage runs every micro-batch but the last
    (stage.py backward_maybe_with_nosync): FSDP2 with gradient sync and resharding after backward
    off. Afterwards, the bytes of the unsharded parameters (the all-gather outputs, kept) and of
    the unsharded gradients accumulated on them, beside the sharded parameters."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    net = build(spec)
    mesh = init_device_mesh("cpu", (world,))
    for layer in net.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)   # the embedding, final norm and head: the root unit
    net.set_requires_gradient_sync(False)
    net.set_reshard_after_backward(False)
    net.set_is_last_backward(False)
    ids, targets = _batch(spec, b, seq_len)
    lm_loss(net(ids), targets).backward()
    params = grads = sharded = 0
    for module in [*net.layers, net]:
        group = getattr(module._get_fsdp_state(), "_fsdp_param_group", None)
        for fp in (group.fsdp_params if group is not None else ()):
            unsharded = fp._unsharded_param
            params += unsharded.untyped_storage().nbytes()
            grad = fp.unsharded_accumulated_grad if fp.unsharded_accumulated_grad is not None else unsharded.grad
            grads += 0 if grad is None else grad.untyped_storage().nbytes()
            sharded += fp._sharded_param_data.untyped_storage().nbytes()
    return {"unsharded_params": params, "unsharded_grads": grads, "sharded_params": sharded}


def _fsdp2_qlora(spec, *, rank, world, seq_len, b):
    """QLoRA under FSDP2 as FSDP-QLoRA shards it: the LoRA reference (rank 4 on qkv, o, mlp) with
    its adapted matrices' frozen weights in NF4 (reference_lora.quantize_base: the packed codes a
    parameter in the model's dtype, the constants attributes), every layer and the root
    fully_shard'ed, one backward without gradient sync or resharding after backward (as
    _fsdp2_nosync). Afterwards, per FSDP unit, the bytes of its unsharded parameters (the
    all-gather outputs) and of its unsharded gradients; the widest layer's and the whole model's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from fitplan.validate.reference_lora import add_lora, quantize_base
    torch.manual_seed(0)
    net = quantize_base(add_lora(build(spec), rank=QLORA[0], targets=QLORA[1]))
    mesh = init_device_mesh("cpu", (world,))
    for layer in net.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    net.set_requires_gradient_sync(False)
    net.set_reshard_after_backward(False)
    net.set_is_last_backward(False)
    ids, targets = _batch(spec, b, seq_len)
    lm_loss(net(ids), targets).backward()
    units = []
    for module in [*net.layers, net]:
        params = grads = 0
        for fp in module._get_fsdp_state()._fsdp_param_group.fsdp_params:
            unsharded = fp._unsharded_param
            params += unsharded.untyped_storage().nbytes()
            grad = fp.unsharded_accumulated_grad if fp.unsharded_accumulated_grad is not None else unsharded.grad
            grads += 0 if grad is None else grad.untyped_storage().nbytes()
        units.append((params, grads))
    layers = units[:-1]
    return {"layer_params": max(p for p, _ in layers), "layer_grads": max(g for _, g in layers),
            "all_params": sum(p for p, _ in units), "all_grads": sum(g for _, g in units)}


_CHECKS = {"ddp": _ddp, "zero1": _zero1, "tp": _tp, "pp": _pp, "ep": _ep, "tp-act": _tp_act, "pp-act": _pp_act,
           "ddp-buckets": _ddp_buckets, "fsdp2-buffers": _fsdp2_buffers, "fsdp2-nosync": _fsdp2_nosync,
           "fsdp2-qlora": _fsdp2_qlora,
           "fsdp2-zero2": lambda spec, **kw: _fsdp2(spec, reshard=False, **kw),
           "fsdp2-zero3": lambda spec, **kw: _fsdp2(spec, reshard=True, **kw)}


# ---------------------------------------------------------------- predictions and rows

CONFIGS = {"ddp": ZeroStage.NONE, "zero1": ZeroStage.OS, "fsdp2-zero2": ZeroStage.OS_G,
           "fsdp2-zero3": ZeroStage.OS_G_P}


def _param_shapes(spec: ModelSpec) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in build(spec, device="meta").parameters()]


def _stage_param_count(spec: ModelSpec, rank: int, world: int) -> int:
    return len(list(PipeStage(build(spec, device="meta"), spec, rank, world).parameters()))


class _EpRank:
    """What MoeMlp asks of its ep group (size, rank), to build a rank's share on the meta device."""

    def __init__(self, size: int, rank: int):
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def _expected(spec: ModelSpec, check: str, rank: int, world: int, seq_len: int) -> dict:
    """{quantity: (planner bytes, extras)} for one rank of one check."""
    shapes = _param_shapes(spec)
    numels = [X._numel(s) for s in shapes]
    if check == "ep":
        planner = X.planner_states(spec, seq_len=seq_len, config=ParallelConfig(dp=world, ep=world))
        local = len(list(build(spec, device="meta", ep_group=_EpRank(world, rank)).parameters()))
        return {"params": (planner["params"], ()), "grads": (planner["grads"], ()),
                "optimizer": (planner["optimizer"], (X.adam_steps(local),))}
    if check == "pp":
        planner = X.planner_states(spec, seq_len=seq_len, config=ParallelConfig(pp=world), first=rank == 0)
        steps = X.adam_steps(_stage_param_count(spec, rank, world))
        return {"params": (planner["params"], ()), "grads": (planner["grads"], ()),
                "optimizer": (planner["optimizer"], (steps,))}
    if check == "tp":
        planner = X.planner_states(spec, seq_len=seq_len, config=ParallelConfig(tp=world))
        grad_extras = () if spec.tied_embeddings else (X.dtensor_embedding_grad(spec, world),)
        return {"params": (planner["params"], ()), "grads": (planner["grads"], grad_extras),
                "optimizer": (planner["optimizer"], (X.adam_steps(len(shapes)),))}
    config = ParallelConfig(dp=world, zero=CONFIGS[check])
    planner = X.planner_states(spec, seq_len=seq_len, config=config)
    if check == "ddp":
        return {"params": (planner["params"], ()), "grads": (planner["grads"], ()),
                "optimizer": (planner["optimizer"], (X.adam_steps(len(shapes)),))}
    if check == "zero1":
        mine = X.zero1_partition(numels, world)[rank]
        return {"params": (planner["params"], ()), "grads": (planner["grads"], ()),
                "optimizer": (planner["optimizer"], _nonzero(X.zero1_packing(numels, world, rank, 8),
                                                             X.adam_steps(len(mine))))}
    total = sum(numels)
    pad_p = X.fsdp2_padding(shapes, world, rank, per_rank_bytes=X.PARAM_BYTES, what="parameter")
    pad_g = X.fsdp2_padding(shapes, world, rank, per_rank_bytes=X.PARAM_BYTES, what="gradient")
    local = X.fsdp2_local_numel(shapes, world, rank)
    moments = 8 * local - planner["optimizer"]
    opt_extras = (X.adam_steps(len(shapes)),) + ((Extra(
        "fsdp2-uneven-shards", moments, "Adam's moments follow the unpadded local shard (torch.chunk sizes)",
        "docs/engines.md#zero-1-fsdp1-and-fsdp2"),) if moments else ())
    grads = (planner["grads"], _nonzero(pad_g))
    opt = (planner["optimizer"], opt_extras)
    sharded = X.PARAM_BYTES * sum(X.fsdp2_rows(s[0], world, rank)[1] * X._row(s) for s in shapes)
    if check == "fsdp2-zero3":
        at_rest = (planner["params"], _nonzero(pad_p))
        return {"params": at_rest, "params_fwd_bwd": at_rest, "grads": grads, "optimizer": opt}
    # ZeRO-2: the planner holds the full 4P weights; FSDP2 holds them between forward and
    # backward (padded all-gather outputs), keeps its sharded copy, and reshards after backward.
    gathered = X.PARAM_BYTES * sum(world * X.fsdp2_rows(s[0], world, rank)[1] * X._row(s) for s in shapes)
    fwd_extras = _nonzero(Extra("fsdp2-gather-padding", gathered - X.PARAM_BYTES * total,
                                "the all-gathered parameters keep the shard padding",
                                "docs/engines.md#zero-1-fsdp1-and-fsdp2"))
    fwd_extras += (Extra("fsdp2-sharded-copy", sharded,
                         "FSDP2 keeps each rank's sharded fp32 parameters (the optimizer updates them) next to "
                         "the unsharded ones; the fp32-adam recipe has no separate master copy to absorb them",
                         "torch/distributed/fsdp/_fully_shard/_fsdp_param.py"),)
    at_rest = (planner["params"], (Extra(
        "fsdp2-reshard-after-backward", sharded - planner["params"],
        "FSDP2 frees the unsharded parameters after backward whatever reshard_after_forward says, so after the "
        "step a ZeRO-2-like FSDP2 holds only its shard (the planner's ZeRO-2 keeps 4P: that is the "
        "forward-to-backward figure)", "docs/engines.md#zero-1-fsdp1-and-fsdp2"),))
    return {"params": at_rest, "params_fwd_bwd": (planner["params"], fwd_extras), "grads": grads,
            "optimizer": opt}


def _nonzero(*extras: Extra) -> tuple[Extra, ...]:
    return tuple(x for x in extras if x.value)


QUANTITY_TEXT = {"params": "params after step", "params_fwd_bwd": "params forward->backward",
                 "grads": "grads after step", "optimizer": "optimizer state after step"}


def state_rows(spec: ModelSpec, records: list[dict], *, seq_len: int, world: int) -> list[Row]:
    rows = []
    for check in STATE_CHECKS:
        recs = sorted((r for r in records if r["check"] == check and r["model"] == spec.name),
                      key=lambda r: r["rank"])
        if not recs:
            continue
        if check == "pp":
            rows += _pp_rows(spec, recs, seq_len=seq_len, world=world)
            continue
        exp = [_expected(spec, check, r["rank"], world, seq_len) for r in recs]
        for quantity in exp[0]:
            pred = [planner + sum(x.value for x in extras) for planner, extras in (e[quantity] for e in exp)]
            busiest = max(range(len(pred)), key=pred.__getitem__)
            planner, extras = exp[busiest][quantity]
            measured = [r[quantity] for r in recs]
            rows.append(Row(section=f"distributed (world {world}, fp32 Adam)",
                            quantity=f"{check} {QUANTITY_TEXT[quantity]}", planner=planner, extras=extras,
                            measured=max(measured), per_rank_predicted=tuple(pred),
                            per_rank_measured=tuple(measured),
                            note=_ep_note(spec, recs, world) if check == "ep" and quantity == "params" else ""))
        if check == "zero1":
            measured = [r["optimizer"] - X.ADAM_STEP_BYTES * r["state_tensors"] for r in recs]
            rows.append(Row(section=f"distributed (world {world}, fp32 Adam)",
                            quantity="zero1 Adam moments, busiest rank vs 8P/N", planner=exp[0]["optimizer"][0],
                            measured=max(measured), relation=">=", per_rank_measured=tuple(measured),
                            note="torch ZeRO-1 packs whole tensors, so the planner's K*P/N is a lower bound "
                                 "(docs/engines.md#zero-1-fsdp1-and-fsdp2)"))
    return rows


def _ep_note(spec: ModelSpec, recs: list[dict], world: int) -> str:
    loads = "; ".join(f"rank {r['rank']} " + ", ".join(map(str, t)) for r in recs for t in r["expert_tokens"])
    return (f"breakdown.stage_memory for ParallelConfig(dp={world}, ep={world}): dense parameters whole on every "
            f"rank, {spec.moe.num_experts // world} of {spec.moe.num_experts} experts per MoE layer "
            f"(stage_expert_params); routed copies received per local expert: {loads}")


def _pp_rows(spec, recs, *, seq_len, world) -> list[Row]:
    rows = []
    for r in recs:
        if r["rank"] not in (0, world - 1):
            continue
        which = "first" if r["rank"] == 0 else "last"
        exp = _expected(spec, "pp", r["rank"], world, seq_len)
        for quantity, (planner, extras) in exp.items():
            rows.append(Row(section=f"distributed (world {world}, fp32 Adam)",
                            quantity=f"pp {which}-stage {QUANTITY_TEXT[quantity]}", planner=planner,
                            extras=extras, measured=r[quantity]))
    return rows


def runtime_rows(spec: ModelSpec, records: list[dict], *, seq_len: int, micro_batch: int, world: int) -> list[Row]:
    """DDP's buckets and FSDP2's buffers against fitplan.memory.runtime's terms (fp32-adam)."""
    rows = []
    section = f"runtime buffers (world {world}, fp32, live tensor bytes)"
    batch = X.batch_extra(seq_len=seq_len, micro_batch=micro_batch)
    recs = sorted((r for r in records if r["check"] == "ddp-buckets" and r["model"] == spec.name),
                  key=lambda r: r["rank"])
    if recs:
        for key, view in (("view", True), ("copy", False)):
            pred = X.planner_runtime(spec, seq_len=seq_len, config=ParallelConfig(dp=world, micro_batch=micro_batch),
                                     grad_bucket_view=view)
            rows.append(Row(section=section, quantity=f"ddp grads + buckets, gradient_as_bucket_view={view}",
                            planner=pred["states/grads"] + pred["runtime/grad_buckets"], extras=(batch,),
                            measured=max(r[key] for r in recs), per_rank_measured=tuple(r[key] for r in recs),
                            per_rank_predicted=(pred["states/grads"] + pred["runtime/grad_buckets"] + batch.value,)
                            * len(recs),
                            note="runtime/grad_buckets: 0 when the gradients are the buckets' views, a second "
                                 "copy of every gradient (g*psi) without them, PyTorch DDP's default" if view else ""))
    recs = sorted((r for r in records if r["check"] == "fsdp2-buffers" and r["model"] == spec.name),
                  key=lambda r: r["rank"])
    if recs:
        config = ParallelConfig(dp=world, zero=ZeroStage.OS_G_P, micro_batch=micro_batch)
        pred = X.planner_runtime(spec, seq_len=seq_len, config=config)
        root = X.fsdp2_root_params(spec)
        fwd = [max(f - s for f, s in zip(r["fsdp"]["layer_forward"], r["single"]["layer_forward"])) for r in recs]
        bwd = [r["fsdp"]["layers_backward"] - r["single"]["layers_backward"] for r in recs]
        forward = pred["aux/fsdp_forward"] + sum(x.value for x in root)
        rows.append(Row(section=section, quantity="fsdp2 gathered units at a layer's forward",
                        planner=pred["aux/fsdp_forward"], extras=root, measured=max(fwd), per_rank_measured=tuple(fwd),
                        per_rank_predicted=(forward,) * len(recs),
                        note="runtime/fsdp_buffers in a forward: the layer computing and one prefetched, "
                             "(1 + k)*w*P_layer (FSDP2's implicit forward prefetch, k = 1)"))
        rows.append(Row(section=section, quantity="fsdp2 buffers over the layers' backward (planner's bound)",
                        planner=pred["runtime/fsdp_buffers"], extras=root, measured=max(bwd), relation="<=",
                        per_rank_measured=tuple(bwd),
                        note="(1 + k)*w*P_layer + g*P_layer: the layer and one prefetched, and the layer's unsharded "
                             "gradients before their reduce-scatter"))
    recs = sorted((r for r in records if r["check"] == "fsdp2-nosync" and r["model"] == spec.name),
                  key=lambda r: r["rank"])
    if recs:
        from fitplan.memory import states as S
        from fitplan.explain import RAW
        from fitplan.memory.copies import accumulated_grads_bytes, gathered_weights_bytes
        from fitplan.memory.stages import stage_at, stage_expert_psi, stage_psi
        config = ParallelConfig(dp=world, zero=ZeroStage.OS_G_P, micro_batch=micro_batch)
        stage = stage_at(RAW, spec, config, 0)
        # Every FSDP unit's parameters, routed experts included: fully_shard(layer) makes the
        # layer's experts FSDPParams of its group, sharded over the same world ranks (ep = 1, so
        # N_ed = N_d), and with reduce_grads and reshard_after_backward off its post_backward
        # keeps all of their unsharded parameters and gradients (_fsdp_param_group.py post_backward).
        psi = int(stage_psi(RAW, spec, config, stage=stage))
        psi_e = 0 if spec.moe is None else int(stage_expert_psi(RAW, spec, config, stage=stage))
        weights = gathered_weights_bytes(psi=psi, psi_e=psi_e, w=4, keep=1)
        grads = int(S.grads_bytes(psi=psi, g=4, n_d=world, zero=ZeroStage.OS_G_P, psi_e=psi_e, n_ed=world)) + \
            accumulated_grads_bytes(psi=psi, psi_e=psi_e, n_d=world, n_ed=world, g=4, pipelined=1)
        note = ("after a backward with gradient sync and resharding after backward off, as torch.distributed."
                "pipelining runs every micro-batch but the last")
        rows.append(Row(section=section, quantity="fsdp2 no-sync: gathered weights kept", planner=weights,
                        measured=max(r["unsharded_params"] for r in recs),
                        per_rank_measured=tuple(r["unsharded_params"] for r in recs),
                        per_rank_predicted=(weights,) * len(recs),
                        note="runtime/gathered_weights = w*(psi + psi_e), the whole stage beside its shards; " + note))
        rows.append(Row(section=section, quantity="fsdp2 no-sync: unsharded gradients", planner=grads,
                        measured=max(r["unsharded_grads"] for r in recs),
                        per_rank_measured=tuple(r["unsharded_grads"] for r in recs),
                        per_rank_predicted=(grads,) * len(recs),
                        note="states/grads + runtime/accumulated_grads = g*(psi + psi_e)/N + g*(psi + psi_e)*(1 - 1/N); "
                             + note))
    recs = sorted((r for r in records if r["check"] == "fsdp2-qlora" and r["model"] == spec.name),
                  key=lambda r: r["rank"])
    if recs:
        pred = X.planner_qlora_fsdp(spec, seq_len=seq_len, micro_batch=micro_batch, world=world, lora=QLORA)
        note = ("NF4 base packed in fp32 storage (bitsandbytes quant_storage), rank-4 adapters on qkv, o, mlp; "
                "after a backward without gradient sync or resharding after backward")
        for quantity, key, measured, text in (
                ("fsdp2 qlora: a layer's gathered unit", "runtime/fsdp_layer_weights", "layer_params",
                 "W_lin - C_q + w*(P_layer - P_lin) + w*P_a: the packed 4-bit codes, norms and biases, adapters; "),
                ("fsdp2 qlora: a layer's unsharded gradients", "runtime/fsdp_buffers", "layer_grads",
                 "runtime/fsdp_buffers with every unit kept gathered = g*T_layer, T_layer = P_a: the adapters' "
                 "only, the frozen base has none; "),
                ("fsdp2 qlora: every unit gathered", "states/frozen_sharded", "all_params",
                 "runtime/gathered_weights = W_shard, the model as FSDP shards it (quantization constants "
                 "excluded: every rank keeps them whole); ")):
            rows.append(Row(section=section, quantity=quantity, planner=pred[key],
                            measured=max(r[measured] for r in recs),
                            per_rank_measured=tuple(r[measured] for r in recs),
                            per_rank_predicted=(pred[key],) * len(recs), note=text + note))
    return rows


def tp_activation_rows(spec: ModelSpec, records: list[dict], *, seq_len: int, micro_batch: int,
                       world: int) -> list[Row]:
    recs = sorted((r for r in records if r["check"] == "tp-act" and r["model"] == spec.name),
                  key=lambda r: r["rank"])
    rows = []
    for key in (recs[0]["act"] if recs else ()):
        kind, mode = key.split("/")
        sp, recompute = kind == "sp", Recompute(mode)
        kw = dict(seq_len=seq_len, micro_batch=micro_batch, act_bytes=ACT_BYTES, recompute=recompute, t=world, sp=sp)
        planner = X.planner_layer_bytes(spec, **kw)
        extras = X.layer_extras(spec, **kw)
        pred = planner + sum(x.value for x in extras)
        measured = tuple(r["act"][key] for r in recs)
        rows.append(Row(section=f"tensor-parallel activations per layer (t={world}, bf16)",
                        quantity=f"{'tp+sp' if sp else 'tp'} {mode}", planner=planner, extras=extras,
                        measured=max(measured), per_rank_predicted=(pred,) * len(recs), per_rank_measured=measured))
    return rows


def pp_activation_rows(spec: ModelSpec, records: list[dict], *, seq_len: int, micro_batch: int,
                       world: int) -> list[Row]:
    """Per schedule, each rank's peak saved bytes against the planner's stage terms
    (chunks_in_flight x one micro-batch's stage activations)."""
    recs = sorted((r for r in records if r["check"] == "pp-act" and r["model"] == spec.name),
                  key=lambda r: r["rank"])
    if not recs:
        return []
    model = pp_act_model(spec, world)
    section = (f"pipeline activations in flight (p={world}, {model.num_layers} layers split "
               f"{'/'.join(str(r['layers']) for r in recs)}, m={PP_MICROBATCHES}, bf16, peak per rank)")
    rows = []
    for schedule in PP_SCHEDULES:
        for r in recs:
            kw = dict(seq_len=seq_len, micro_batch=micro_batch, act_bytes=ACT_BYTES, world=world, rank=r["rank"],
                      schedule=schedule, microbatches=PP_MICROBATCHES)
            planner = X.planner_pp_stage(model, **kw)
            n = planner["chunks"]
            rows.append(Row(section=section, quantity=f"{schedule} stage {r['rank']} ({r['layers']} layers, "
                                                      f"{n} micro-batch{'' if n == 1 else 'es'} in flight)",
                            planner=planner["bytes"], extras=X.pp_extras(model, **kw), measured=r[schedule],
                            note="" if r[f"{schedule}_left"] == 0 else
                            f"{r[f'{schedule}_left']:,} B still saved after the step"))
    return rows


if __name__ == "__main__":
    _main(sys.argv[1:])
