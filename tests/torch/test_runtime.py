"""The runtime terms and the peak over the step against real PyTorch on CPU (fitplan.validate.peak:
live tensor bytes after every operator), and the GPU judgement's plumbing on the CPU stand-in.

Expected relations (tiny models, fp32 unless noted, beyond the model states):
  loss backward     stored activations + runtime/logits_grad (8*s*b*V: F.cross_entropy's two
                    fp32 logit gradients) + the reference's named extras              exact
  optimizer step    runtime/optimizer_step (foreach AdamW: the second moment's sqrt, v*psi;
                    fused: 0) + the batch                                            exact
  a layer's backward, the step's peak   the planner's moment is an upper bound      <=
  DDP               grads + runtime/grad_buckets (0 with bucket views, g*psi without)  exact
  FSDP2 (ZeRO-3)    at a layer's forward (1 + k)*w*P_layer, k = 1                    exact
                    over the layers' backward (1 + k)*w*P_layer + g*P_layer           <=
"""
import pytest

torch = pytest.importorskip("torch")

from fitplan.specs import Recompute  # noqa: E402
from fitplan.validate import TINY_GPT, TINY_LLAMA  # noqa: E402
from fitplan.validate import distributed as D  # noqa: E402
from fitplan.validate import expected as X  # noqa: E402
from fitplan.validate.runner import judge_cuda, judged_cuda_rows, step_rows  # noqa: E402

S, B = 64, 2


@pytest.mark.parametrize("spec", [TINY_GPT, TINY_LLAMA], ids=lambda m: m.name)
def test_the_step_against_live_tensor_bytes(spec):
    rows = step_rows(spec, seq_len=S, micro_batch=B)
    assert rows and all(r.ok for r in rows), [(r.quantity, r.predicted, r.measured) for r in rows if not r.ok]
    by = {r.quantity: r for r in rows}
    for dtype in ("bf16", "fp32"):
        for mode in ("none", "selective", "full"):
            loss = by[f"loss backward {dtype} {mode} (stored + logit gradients)"]
            assert loss.exact and loss.measured == loss.predicted
            step = by[f"optimizer step {dtype} {mode} (foreach AdamW)"]
            assert step.measured == step.predicted
            assert by[f"layers backward {dtype} {mode} (planner's upper bound)"].relation == "<="
    # foreach AdamW's scratch is the second moment's size (fp32: 4 B per parameter); fused keeps none
    plan = X.planner_moments(spec, seq_len=S, micro_batch=B, act_bytes=4, recompute=Recompute.NONE,
                             optimizer_impl="foreach")
    assert plan["optimizer_step"] == 4 * sum(p.numel() for p in D.build(spec, device="meta").parameters())
    assert by["optimizer step fp32 none (fused AdamW)"].planner == 0


@pytest.fixture(scope="module")
def records():
    return D.measure_distributed([TINY_GPT, TINY_LLAMA], seq_len=S, micro_batch=B, world_size=2,
                                 checks=D.RUNTIME_CHECKS)


@pytest.mark.parametrize("spec", [TINY_GPT, TINY_LLAMA], ids=lambda m: m.name)
def test_ddp_buckets_and_fsdp2_buffers(spec, records):
    rows = D.runtime_rows(spec, records, seq_len=S, micro_batch=B, world=2)
    assert len(rows) == 6 and all(r.ok for r in rows), [(r.quantity, r.predicted, r.measured) for r in rows]
    view, copy = rows[0], rows[1]
    grads = 4 * sum(p.numel() for p in D.build(spec, device="meta").parameters())
    assert view.planner == grads and copy.planner == 2 * grads   # PyTorch DDP's default: a second copy
    forward, backward = rows[2], rows[3]
    assert forward.exact and forward.measured == forward.predicted
    assert backward.relation == "<=" and backward.measured <= backward.predicted
    # a backward as torch.distributed.pipelining runs every micro-batch but the last (sync and resharding
    # off): the gathered weights are a whole fp32 copy, 4*psi, and the unsharded gradients 4*psi, to the byte
    psi = sum(p.numel() for p in D.build(spec, device="meta").parameters())
    kept, accumulated = rows[4], rows[5]
    assert kept.exact and kept.measured == kept.planner == 4 * psi
    assert accumulated.exact and accumulated.measured == accumulated.planner == 4 * psi


def test_judging_a_gpu_step():
    """Synthetic measurements: within 5% of the planner's figures is ok, 10% off is not."""
    plan = judge_cuda(TINY_LLAMA, {"max_allocated": 1, "max_reserved": 1, "outside_allocator": 0,
                                   "device_name": "x", "capability": [9, 0], "expandable_segments": True},
                      seq_len=S, micro_batch=B, recompute=Recompute.NONE)
    allocated, reserved, outside = plan
    assert reserved.predicted - allocated.predicted == 22 * 2**20   # the allocator's pages, one stream
    assert outside.planner == 400 * 2**20 and outside.relation == "info"
    for factor, ok in ((1.03, True), (0.97, True), (1.10, False)):
        got = {"max_allocated": int(allocated.predicted * factor), "max_reserved": int(reserved.predicted * factor),
               "outside_allocator": 0, "device_name": "x", "capability": [9, 0], "expandable_segments": True}
        rows = judge_cuda(TINY_LLAMA, got, seq_len=S, micro_batch=B, recompute=Recompute.NONE)
        assert [r.ok for r in rows[:2]] == [ok, ok]


def test_the_cpu_stand_in_runs_the_gpu_harness():
    rows = judged_cuda_rows(TINY_LLAMA, seq_len=S, micro_batch=B, recompute=Recompute.FULL, device="cpu")
    allocated = rows[0]
    assert allocated.quantity.startswith("max_memory_allocated") and allocated.relation == "~="
    assert allocated.ok, (allocated.predicted, allocated.measured)


def test_loss_parallel_backward_holds_three_logit_sized_tensors():
    """torch's loss_parallel (vocab-sharded logits, t > 1; torchtitan's loss under tensor parallelism) runs its
    backward as _nll_loss_and_log_softmax_backward on each rank's shard: zeros_like(x), exp(x) and their sum
    live at once beside the saved fp32 log-probabilities x. Measured here on one rank's shard (a one-rank
    mesh: the handler's all-reduces are then trivial): the peak is 4 x 4*N*V bytes, so the backward adds
    12*N*V, the planner's runtime/logits_grad for t > 1 (against 8*N*V for F.cross_entropy at t = 1)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss as L

    from fitplan.memory import runtime as RT
    from fitplan.validate.peak import LiveBytes
    N, V = 512, 1024
    created = not dist.is_initialized()
    if created:
        import tempfile
        store = tempfile.NamedTemporaryFile(delete=False)
        dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        torch.manual_seed(0)
        x = torch.log_softmax(torch.randn(N, V), -1)
        target = torch.randint(0, V, (N,))
        live = LiveBytes()
        live.add_all([target])
        live.base = live.now()
        live.add(x)
        with live:
            live.mark("backward")
            L._nll_loss_and_log_softmax_backward(torch.tensor(1.0), x, target, None, 1, -100, torch.tensor(float(N)),
                                                 x.shape, 1, mesh, 0)
        beyond_saved = live.peaks["backward"] - 4 * N * V
        # N*V elements is one rank's shard: s*b*V/t with t = 2 over V = 2048 (no output layer: h = w = 0)
        planner = RT.logits_grad_bytes(s=N, b=1, V=2 * V, e=2, t=2, c=1, kernel="pytorch")
        # exact but for the handler's N-sized index and mask tensors (a few KiB)
        assert 12 * N * V <= beyond_saved < 12 * N * V + 64 * N
        assert planner == 12 * N * V
    finally:
        if created:
            dist.destroy_process_group()
