"""bench/gpu_step.py times a training step on a GPU (none here); what runs without one is checked: the flags it
gives `fitplan plan` state the model it builds, and the estimate it compares against is the plan's own."""
import io
import json

from fitplan.cli import main
from tests.scripts import load

GS = load("bench/gpu_step.py")


def test_the_flags_state_tinyllamas_shape():
    # 22 layers x (q, k, v, o: 2048 x (2048 + 256 + 256 + 2048) = 9,437,184; SwiGLU 3 x 2048 x 5632 = 34,603,008;
    # two RMSNorms 4,096) = 968,974,336, plus untied embedding and output 2 x 32,000 x 2,048 = 131,072,000 and the
    # final norm 2,048: 1,100,048,384, the count the script's reference model had on the H200 (docs/measurements)
    out = io.StringIO()
    assert main(GS.flags(4096, 4, "h200-141gb"), out=out, err=io.StringIO()) == 0
    model = json.loads(out.getvalue())["model"]
    assert model["num_params"] == 1_100_048_384


def test_the_estimate_is_the_plans():
    out = io.StringIO()
    main(GS.flags(2048, 8, "h200-141gb"), out=out, err=io.StringIO())
    plan = json.loads(out.getvalue())["time"]
    got = GS.predicted(2048, 8, "h200-141gb")
    assert got["step_s"] == plan["step_s"]
    assert got["band_s"] == [plan["uncertainty"]["low_s"], plan["uncertainty"]["high_s"]]
