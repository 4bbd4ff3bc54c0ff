"""fitplan validate's LoRA rows: a tiny model with adapters (plain PyTorch) measured against the planner,
exact, for parameters, weights, gradients, optimizer state, activations per layer and FLOPs."""
import pytest

torch = pytest.importorskip("torch")

from fitplan.validate import TINY_GPT, TINY_LLAMA  # noqa: E402
from fitplan.validate.runner import lora_rows  # noqa: E402
from tests.torch.shapes import TINY_MIX  # noqa: E402


@pytest.mark.parametrize("model", [TINY_GPT, TINY_LLAMA, TINY_MIX], ids=lambda m: m.name)
@pytest.mark.parametrize("lora", [(4, "qkv,o,mlp"), (2, "qkv"), (8, "o,mlp")], ids=lambda x: f"r{x[0]}-{x[1]}")
def test_every_lora_row_is_exact(model, lora):
    rows = lora_rows(model, seq_len=32, micro_batch=2, lora=lora)
    quantities = {r.quantity for r in rows}
    assert {"adapter parameters (trained)", "gradients (adapters only)", "optimizer state (Adam over the adapters)",
            "layer bf16 none", "layer fp32 full", "hardware FLOPs none"} <= quantities
    for row in rows:
        assert row.exact and row.ok, (row.quantity, row.predicted, row.measured)


def test_the_adapters_are_what_the_planner_counts():
    """TINY_LLAMA (h 128, q 128, kv 32, f 352, SwiGLU, 2 layers) at r = 4 on every target:
    2 x 4 x ((3*128 + 128 + 2*32) + (128 + 128) + 3*(128 + 352)) = 18,176."""
    rows = {r.quantity: r for r in lora_rows(TINY_LLAMA, seq_len=16, micro_batch=1)}
    assert rows["adapter parameters (trained)"].measured == 2 * 4 * ((3 * 128 + 128 + 2 * 32) + 256 + 3 * 480)
    assert rows["gradients (adapters only)"].measured == 4 * 18_176


def test_nf4_linear_stores_what_the_planner_counts():
    """A 64 x 256 weight (n = 16,384) in NF4 with double quantization: the packed codes n/2 = 8,192 B (a
    parameter of the model's dtype: 2,048 fp32 elements in a column, bitsandbytes' quant_storage layout), and
    constants n/64 = 256 8-bit absmax codes + one fp32 scale per 256 of them + the fp32 mean = 256 + 4 + 4:
    finetune.quant_constant_bytes's psi/64 + 4*psi/(64*256) = 260 plus the one per-tensor mean it leaves out."""
    from fitplan.memory.finetune import quant_constant_bytes
    from fitplan.validate.reference_lora import Nf4Linear
    torch.manual_seed(0)
    base = torch.nn.Linear(256, 64)
    q = Nf4Linear(base)
    assert q.packed.dtype == torch.float32 and tuple(q.packed.shape) == (2048, 1) and not q.packed.requires_grad
    assert q.packed.untyped_storage().nbytes() == 16_384 // 2
    assert sum(t.untyped_storage().nbytes() for t in q.constant_tensors()) == 256 + 4 + 4
    assert quant_constant_bytes(psi=16_384, precision="nf4") == 260
    # every weight lands on its block's nearest NF4 level: within half the widest gap (1 - 0.723) of absmax,
    # plus the 8-bit absmax code's own rounding
    w, got = base.weight.detach(), q.weight()
    absmax = w.reshape(-1, 64).abs().amax(1, keepdim=True)
    assert ((got - w).reshape(-1, 64).abs() / absmax).max() < (1 - 0.7229568362236023) / 2 + 0.02


def test_fsdp2_qlora_gathers_the_packed_base():
    """fitplan validate's fsdp2-qlora rows, TINY_GPT (h 64, 4 heads, ffn 256, V 512, 128 learned positions,
    LayerNorm, biases, tied) on 2 gloo ranks, fp32, NF4 base, rank-4 adapters on qkv, o, mlp. One layer:
      linear weights P_lin = 4*64*64 + 2*64*256 = 49,152, packed n/2 = 24,576 B;
      biases 4*64 + 256 + 64 and two LayerNorms 4*64: 832 parameters at 4 B = 3,328 B;
      adapters P_a = 4*(3*(64 + 64) + (64 + 64) + 2*(64 + 256)) = 4,608 at 4 B = 18,432 B.
    W_layer = 24,576 + 3,328 + 18,432 = 46,336; G_layer = 18,432 (the frozen base gets none). Every unit:
    2*46,336 + the root's embedding, positions and final norm (32,768 + 8,192 + 128)*4 = 257,024. Exact,
    per rank; before, the planner gathered every weight at 4 B and gave each a gradient."""
    from fitplan.validate import distributed as D
    records = D.measure_distributed([TINY_GPT], seq_len=32, micro_batch=1, world_size=2, checks=("fsdp2-qlora",))
    rows = {r.quantity: r for r in D.runtime_rows(TINY_GPT, records, seq_len=32, micro_batch=1, world=2)}
    expected = {"fsdp2 qlora: a layer's gathered unit": 24_576 + 3_328 + 18_432,
                "fsdp2 qlora: a layer's unsharded gradients": 4 * 4_608,
                "fsdp2 qlora: every unit gathered": 2 * 46_336 + 4 * (32_768 + 8_192 + 128)}
    assert expected == {"fsdp2 qlora: a layer's gathered unit": 46_336,
                        "fsdp2 qlora: a layer's unsharded gradients": 18_432,
                        "fsdp2 qlora: every unit gathered": 257_024}
    for quantity, value in expected.items():
        row = rows[quantity]
        assert row.relation == "==" and row.ok and row.planner == value
        assert row.per_rank_measured == (value, value)
