"""Two pieces of issue 13: the search's context-parallel range grows with the sequence, and
MFU is reported with full and with causal attention FLOPs."""
import io
import json

import pytest

from fitplan.answers import default_max_cp, space_for
from fitplan.cli import main
from fitplan.request import Request
from fitplan.resolve import resolve


@pytest.mark.parametrize(("seq_len", "max_cp"), [(8192, 8), (131071, 8), (131072, 16), (1048575, 16), (1048576, 32)])
def test_the_cp_range_grows_with_the_sequence(seq_len, max_cp):
    """8 below 128K tokens, 16 from 128K (Llama 3 Herd Table 4: cp 16 at 131,072), 32 from 1M."""
    assert default_max_cp(seq_len) == max_cp
    r = resolve(Request(command="plan", values={"preset": "llama3.1-8b", "gpus": 64, "seq_len": seq_len}))
    assert max(space_for(r.setup, 1, r.search, {}).cp) == min(max_cp, 64)


def test_max_cp_overrides_the_default():
    r = resolve(Request(command="plan", values={"preset": "llama3.1-8b", "gpus": 64, "seq_len": 2**20, "max_cp": 4}))
    assert max(space_for(r.setup, 1, r.search, {}).cp) == 4


def test_mfu_with_causal_attention_flops():
    """GPT-3 175B, tp 8 pp 2 SP selective, s 2048. Model FLOPs per step are
    72*B*s*L*h^2*(1 + s/(6h) + V/(12*L*h)) (Korthikanti Eq. 7 without recompute; the s/(6h) term is
    the attention core); a causal mask halves that term. So mfu_causal / mfu =
    (1 + s/(12h) + V/(12Lh)) / (1 + s/(6h) + V/(12Lh)) = 1.0174393 / 1.0313281 = 0.98653."""
    out = io.StringIO()
    assert main(["plan", "--preset", "gpt3-175b", "--gpus", "16", "--tp", "8", "--pp", "2", "--sequence-parallel",
                 "--recompute", "selective", "--json"], out=out) == 0
    t = json.loads(out.getvalue())["time"]
    s, h, L, V = 2048, 12288, 96, 50257
    ratio = (1 + s / (12 * h) + V / (12 * L * h)) / (1 + s / (6 * h) + V / (12 * L * h))
    assert t["mfu_causal"] / t["mfu"] == pytest.approx(ratio, rel=1e-9)
    assert ratio == pytest.approx(0.98653, abs=1e-5)
