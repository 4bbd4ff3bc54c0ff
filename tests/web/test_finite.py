"""Never a 200 with NaN, never a 500 for a bad input: inputs that drive the arithmetic out of range
(a denormal efficiency or bandwidth the declarations still accept) are a 400 with one line, and
every JSON the server writes itself is made with allow_nan=False."""
import json

import pytest

from fitplan.web import app, worker

OUT_OF_RANGE = [
    ("plan", {"preset": "gpt3-175b", "gpus": 16, "suggest": True, "gemm_efficiency": 1e-320}),    # was 200 with Infinity
    ("plan", {"preset": "gpt3-175b", "gpus": 16, "suggest": True, "intra_node_bandwidth": "1e-320 B/s"}),
    ("compare", {"preset": "gpt3-175b", "gpus": 16, "gemm_efficiency": 1e-320}),                  # was a 500
    ("compare", {"preset": "gpt3-175b", "gpus": 16, "inter_node_bandwidth": "1e-320 B/s"}),
]


@pytest.mark.parametrize("endpoint,body", OUT_OF_RANGE, ids=[f"{e}-{i}" for i, (e, _) in enumerate(OUT_OF_RANGE)])
def test_out_of_range_arithmetic_is_a_400_with_one_line(client, endpoint, body):
    r = client.post(f"/api/{endpoint}", body)
    assert r.status == 400, r.body[:300]
    error = r.json["error"]
    assert "\n" not in error and "Traceback" not in error
    assert b"NaN" not in r.body and b"Infinity" not in r.body


def test_the_server_never_writes_nan(monkeypatch):
    with pytest.raises(ValueError):
        app.json_response(200, {"x": float("nan")})
    monkeypatch.setattr(app, "presets_payload", lambda: {"x": float("inf")})
    r = app.handle("GET", "/api/presets", {}, None)
    assert r.status == 500 and json.loads(r.body) == {"error": app.INTERNAL_ERROR}


def test_a_nan_reply_is_caught_in_the_worker():
    assert worker.finite_json('{"a": 1.5}') and not worker.finite_json('{"a": NaN}')
    assert not worker.finite_json('{"a": [Infinity]}') and not worker.finite_json('{"a": -Infinity}')
