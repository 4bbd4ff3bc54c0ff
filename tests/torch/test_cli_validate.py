"""`fitplan validate --json`: the contract rows (quantity, predicted, measured, ratio, exact)
and exit 0 when every row is within its tolerance (here all exact)."""
import io
import json

import pytest

torch = pytest.importorskip("torch")

from fitplan.cli import main  # noqa: E402


def test_validate_json_rows_and_exit_code():
    out = io.StringIO()
    code = main(["validate", "--model", "tiny-llama", "--no-distributed", "--seq-len", "32", "--micro-batch", "1",
                 "--json"], out=out)
    data = json.loads(out.getvalue())
    assert code == 0 and data["ok"]
    assert len(data["rows"]) >= 10
    for row in data["rows"]:
        assert {"quantity", "predicted", "measured", "ratio", "exact"} <= set(row)
        if row["exact"]:
            assert row["predicted"] == row["measured"] and row["ratio"] == 1


def test_validate_bad_world_sizes_is_one_line():
    err = io.StringIO()
    assert main(["validate", "--world-sizes", "two"], out=io.StringIO(), err=err) == 2
    assert err.getvalue().count("\n") == 1
