"""`fitplan validate --model tiny-hybrid`: a pure-PyTorch Mamba-2 hybrid (reference_hybrid) against
the planner. Its parameters, each kind of layer's stored bytes (bf16 and fp32, no recompute) and
one step's FLOPs are exact; the figures are the ones the README's hybrid paragraph quotes."""
import pytest

torch = pytest.importorskip("torch")

from fitplan.errors import SpecError  # noqa: E402
from fitplan.validate import TINY_HYBRID, run_validation  # noqa: E402
from fitplan.validate import expected as X  # noqa: E402
from fitplan.validate.measure import count_flops, count_params, saved_activations  # noqa: E402
from fitplan.specs import Recompute  # noqa: E402


def test_tiny_hybrid_rows_all_exact():
    report = run_validation(model=TINY_HYBRID, include_distributed=False)
    assert report.ok
    by = {r.quantity: r for r in report.rows}
    assert all(r.exact for r in report.rows)
    # s = 128, b = 2, h = 64: the figures fitplan validate prints
    assert by["mamba layer bf16 none"].measured == 447_488          # 446,464 planner + 1,024 norm statistics
    assert by["attention layer bf16 none"].measured == 852_992      # 835,584 + 17,408 (stats and the causal mask)
    assert by["mlp layer fp32 none"].measured == 410_624            # 409,600 + 1,024
    assert by["hardware FLOPs none"].measured == 246_153_216        # 239,861,760 + 6,291,456 scan rerun


def test_tiny_hybrid_parameters():
    # 2 Mamba-2 layers: in_proj 64*(2*128 + 2*2*16 + 4) = 20,736, conv (128 + 64)*(4 + 1) = 960,
    # A_log, D, dt_bias 3*4, gated norm 128, out_proj 128*64 = 8,192, pre-norm 64: 30,092 each;
    # attention 64*(64 + 2*32) + 64*64 + 64 = 12,352; MLP 2*64*128 + 64 = 16,448;
    # embedding and output 2*512*64 = 65,536, final norm 64
    assert count_params(TINY_HYBRID) == 2 * 30_092 + 12_352 + 16_448 + 65_536 + 64 == 154_584


def test_saved_bytes_per_kind_match_pattern_order():
    kw = dict(seq_len=64, micro_batch=1, act_bytes=2)
    got = saved_activations(TINY_HYBRID, recompute=Recompute.NONE, **kw)
    want = tuple(X.planner_block_bytes(TINY_HYBRID, k, **kw) + sum(x.value for x in X.block_extras(TINY_HYBRID, k, **kw))
                 for k in TINY_HYBRID.layer_pattern)
    assert got.per_layer == want


def test_flops_at_another_shape():
    kw = dict(seq_len=64, micro_batch=1, recompute=Recompute.NONE)
    extra = sum(x.value for x in X.hybrid_flops_extras(TINY_HYBRID, seq_len=64, micro_batch=1))
    assert count_flops(TINY_HYBRID, **kw) == X.planner_flops(TINY_HYBRID, **kw) + extra


def test_seq_len_must_be_whole_chunks():
    with pytest.raises(SpecError, match="multiple of 32"):
        run_validation(model=TINY_HYBRID, seq_len=48, include_distributed=False)
