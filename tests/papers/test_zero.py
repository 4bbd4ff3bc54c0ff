"""[zero] Table 1: per-device model-state memory, mixed-precision Adam (K = 12), in GB = 1e9 B.

Every cell is the Sec. 5 formula: P_os 4psi + 12psi/N_d, P_os+g 2psi + 14psi/N_d,
P_os+g+p 16psi/N_d. The paper prints some cells rounded and some truncated (1T P_os at
N_d = 64 is 4187.5, printed 4187), so a printed value must be within one unit of its last
printed digit of the exact value; the bytes themselves are checked exactly.
"""
from fractions import Fraction

import pytest

from fitplan.memory import states as S
from fitplan.presets import recipe
from fitplan.specs.parallel import ZeroStage

ADAM = recipe("mixed-adam")
MODELS = {"7.5B": 7_500_000_000, "128B": 128_000_000_000, "1T": 1_000_000_000_000}
# N_d -> printed cells, in the paper's column order: (7.5B, 128B, 1T) x (P_os, P_os+g, P_os+g+p)
TABLE1 = {
    1: ("120", "120", "120", "2048", "2048", "2048", "16000", "16000", "16000"),
    4: ("52.5", "41.3", "30", "896", "704", "512", "7000", "5500", "4000"),
    16: ("35.6", "21.6", "7.5", "608", "368", "128", "4750", "2875", "1000"),
    64: ("31.4", "16.6", "1.88", "536", "284", "32", "4187", "2218", "250"),
    256: ("30.4", "15.4", "0.47", "518", "263", "8", "4046", "2054", "62.5"),
    1024: ("30.1", "15.1", "0.12", "513", "257", "2", "4011", "2013", "15.6"),
}
STAGES = (ZeroStage.OS, ZeroStage.OS_G, ZeroStage.OS_G_P)
EXACT_PER_PSI = {ZeroStage.OS: (4, 12), ZeroStage.OS_G: (2, 14), ZeroStage.OS_G_P: (0, 16)}  # a*psi + b*psi/N_d


def per_device_bytes(psi: int, n_d: int, zero: ZeroStage) -> int:
    kw = dict(psi=psi, n_d=n_d, zero=zero)
    return (S.weights_bytes(w=ADAM.weights_bytes, **kw) + S.grads_bytes(g=ADAM.grads_bytes, **kw)
            + S.master_bytes(m=ADAM.master_bytes, **kw) + S.optimizer_bytes(K=ADAM.optimizer_bytes, **kw))


CASES = [(name, n_d, zero, TABLE1[n_d][3 * m + z])
         for n_d in TABLE1 for m, name in enumerate(MODELS) for z, zero in enumerate(STAGES)]


@pytest.mark.parametrize(("model", "n_d", "zero", "printed"), CASES)
def test_table1_cell(model, n_d, zero, printed):
    psi = MODELS[model]
    got = per_device_bytes(psi, n_d, zero)
    a, b = EXACT_PER_PSI[zero]
    exact = Fraction(a * psi) + Fraction(b * psi, n_d)    # Sec. 5 formula
    assert 0 <= got - exact < 4                           # each of <= 4 sharded buffers pads to a whole byte
    last_digit = 10 ** -len(printed.split(".")[1]) if "." in printed else 1
    assert abs(got / 1e9 - float(printed)) < last_digit   # printed rounded or truncated to its last digit


def test_table1_has_every_cell():
    assert len(CASES) == 54   # 6 rows x 9 columns


def test_section_5_examples():
    """Sec. 5 text: 7.5B at N_d = 64 needs 31.4 GB (P_os), 16.6 GB (P_os+g), 1.9 GB (P_os+g+p), 120 GB for DP."""
    psi = 7_500_000_000
    assert per_device_bytes(psi, 64, ZeroStage.NONE) == 120_000_000_000
    assert per_device_bytes(psi, 64, ZeroStage.OS) == 31_406_250_000
    assert per_device_bytes(psi, 64, ZeroStage.OS_G) == 16_640_625_000
    assert per_device_bytes(psi, 64, ZeroStage.OS_G_P) == 1_875_000_000
