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
