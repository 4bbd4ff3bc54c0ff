"""[narayanan] Table 1 parameter counts from Eq. 2, P = 12lh^2(1 + 13/(12h) + (V + s)/(12lh)),
V = 51200, s = 2048, printed in billions to 0.1 (1008.0 for the 1T model)."""
import pytest

from fitplan.counts.params import narayanan_eq2, shape_params
from fitplan.specs.model import ModelSpec

TABLE1 = [  # printed billions, heads, hidden, layers
    (1.7, 24, 2304, 24), (3.6, 32, 3072, 30), (7.5, 32, 4096, 36), (18.4, 48, 6144, 40),
    (39.1, 64, 8192, 48), (76.1, 80, 10240, 60), (145.6, 96, 12288, 80), (310.1, 128, 16384, 96),
    (529.6, 128, 20480, 105), (1008.0, 160, 25600, 128),
]


@pytest.mark.parametrize(("printed", "heads", "h", "l"), TABLE1)
def test_table1_counts(printed, heads, h, l):
    p = narayanan_eq2(l=l, h=h, V=51200, s=2048)
    assert p == 12 * l * h * h + 13 * l * h + (51200 + 2048) * h     # Eq. 2 expanded, exact
    assert p / 1e9 == pytest.approx(printed, abs=0.05)                # printed to 0.1 B


@pytest.mark.parametrize(("printed", "heads", "h", "l"), TABLE1)
def test_shape_count_is_eq2_plus_final_layernorm(printed, heads, h, l):
    """The shape count adds the final LayerNorm (2h) that Eq. 2 leaves out."""
    model = ModelSpec(name="n", num_layers=l, hidden_size=h, num_heads=heads, num_kv_heads=heads,
                      ffn_hidden_size=4 * h, vocab_size=51200, max_seq_len=2048)
    assert shape_params(model) - narayanan_eq2(l=l, h=h, V=51200, s=2048) == 2 * h


def test_gpt3_eq2():
    """REFERENCE 2.2: Eq. 2 for GPT-3 (l = 96, h = 12288, V = 51200) gives 174.6e9."""
    assert narayanan_eq2(l=96, h=12288, V=51200, s=2048) / 1e9 == pytest.approx(174.6, abs=0.05)
