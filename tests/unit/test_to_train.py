"""Time, cost and energy to train (--train-tokens, --gpu-hour-price, --gpu-power, --pue; --rank cost).

The formulas by hand; Narayanan et al. Eq. 4's GPT-3 anchor (about 34 days) and how fitplan's
days relate to it; the JSON contract: with --train-tokens every plan and suggestion gains
`to_train` {tokens, days, gpu_hours, energy_mwh, cost}, cost null without a price; exit codes; and
the same inputs from a spec file and the JSON API. Each expected number is derived beside it."""
import io
import json
from dataclasses import replace

import pytest

from fitplan.cli import main
from fitplan.request import Request
from fitplan.resolve import config_of, resolve
from fitplan.service import respond
from fitplan.timing.breakdown import evaluate_step
from fitplan.timing.to_train import (energy_mwh, gpu_hours, narayanan_end_to_end_s, to_train, train_cost,
                                     train_days, train_seconds)
from fitplan.web.server import build_request

KEYS = {"tokens", "days", "gpu_hours", "energy_mwh", "cost"}   # the contract's names, exactly
LLAMA_64 = ["plan", "--preset", "llama3.1-8b", "--gpus", "64"]


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def run_json(argv):
    code, out, err = run([*argv, "--json"])
    assert code in (0, 1), err
    return code, json.loads(out)


# ------------------------------------------------------------------ the formulas by hand

def test_the_formulas_by_hand():
    """1T tokens at 1M tokens/s on 64 GPUs of 700 W, PUE 1, 2.50 per GPU-hour."""
    T = train_seconds(D=10**12, R=10**6)
    assert T == 10**6                                                   # 1e12 / 1e6 = 1,000,000 s
    assert train_days(T=T) == pytest.approx(11.574074074, rel=1e-9)     # 1e6 / 86,400
    H = gpu_hours(N=64, T=T)
    assert H == pytest.approx(17_777.777778, rel=1e-9)                  # 64 x 1e6 / 3,600
    assert energy_mwh(N=64, P=700, PUE=1, T=T) == pytest.approx(12.444444, rel=1e-6)   # 64 x 700 x 1e6 J / 3.6e9
    assert energy_mwh(N=64, P=700, PUE=1.5, T=T) == pytest.approx(18.666667, rel=1e-6)  # x 1.5
    assert train_cost(H=H, price=2.5) == pytest.approx(44_444.444444, rel=1e-9)        # 17,777.8 x 2.5


# ------------------------------------------------------------------ Narayanan et al. Eq. 4

# GPT-3 175B (Narayanan et al. Sec. 5.1): T = 300B tokens, P = 175B, n = 1024 A100, X = 140 TFLOP/s per GPU.
EQ4_S = 8 * 300e9 * 175e9 / (1024 * 140e12)   # 4.2e23 / 1.4336e17 = 2,929,687.5 s
EQ4_DAYS = EQ4_S / 86_400                      # 33.908 days: "about 34 days"
# GPT-3's shape: l = 96, h = 12288, s = 2048, V = 51200. Eq. 3, hardware FLOPs per token with full
# recompute: 96*l*h^2*(1 + s/(6h) + V/(16*l*h)) = 1.433999e12; Eq. 4 keeps its leading 8P = 1.4e12.
L_, H_, S_, V_ = 96, 12288, 2048, 51200
EQ3_PER_TOKEN = 96 * L_ * H_**2 * (1 + S_ / (6 * H_) + V_ / (16 * L_ * H_))
GPT3_1024 = {"preset": "gpt3-175b", "gpu": "a100-80gb", "gpus": 1024, "global_batch": 1536, "tp": 8, "pp": 16,
             "recompute": "full", "train_tokens": "300B"}   # Narayanan's batch 1536; dp = 1024/(8*16) = 8


def test_narayanan_eq4_gpt3_is_about_34_days():
    assert narayanan_end_to_end_s(T=300e9, P=175e9, n=1024, X=140e12) == pytest.approx(2_929_687.5)
    assert EQ4_DAYS == pytest.approx(33.908, abs=1e-3) and round(EQ4_DAYS) == 34


def _gpt3(efficiency=None):
    r = resolve(Request(command="plan", values=GPT3_1024))
    setup = r.setup
    if efficiency is not None:
        gpu = replace(setup.cluster.gpu, efficiency=efficiency)
        setup = replace(setup, cluster=replace(setup.cluster, gpu=gpu))
    st = evaluate_step(setup, config_of(r))
    return setup, st, to_train(setup, st)


def test_fitplan_days_are_tokens_times_hardware_flops_per_token_over_n_x():
    """fitplan's T = D/R = D * F_tok / (N * X): the step's hardware FLOPs per token F_tok, its
    achieved FLOP/s per GPU X. F_tok is Eq. 3 per token (to 0.01%); Eq. 4 rounds it to 8P, so
    fitplan's days are Eq. 4's at the same X times F_tok/(8P) = 1.0242."""
    setup, st, t = _gpt3()
    f_step = next(term.value for term in st.terms if term.key == "flops/hardware_step")
    f_tok = f_step / (1536 * 2048)                       # B = dp*m*b = 8*192*1 = 1536 sequences of 2048
    x = st.tflops_per_gpu * 1e12
    assert t.days == pytest.approx(300e9 / st.tokens_per_s / 86_400, rel=1e-12)
    assert t.days * 86_400 * 1024 * x == pytest.approx(300e9 * f_tok, rel=1e-9)
    assert f_tok == pytest.approx(EQ3_PER_TOKEN, rel=1e-4)
    eq4_here = narayanan_end_to_end_s(T=300e9, P=175e9, n=1024, X=x) / 86_400
    assert t.days / eq4_here == pytest.approx(f_tok / (8 * 175e9), rel=1e-9)
    assert f_tok / (8 * 175e9) == pytest.approx(1.0242, abs=1e-4)


def test_fitplan_days_at_140_tflops_per_gpu_match_eq4():
    """The same configuration with the GEMM efficiency set so that it achieves X = 140 TFLOP/s
    per GPU (bisection): 33.908 x 1.0242 = 34.73 days, within the 2.4% of attention and logits
    FLOPs that Eq. 4 leaves out."""
    lo, hi = 0.3, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        _, st, _ = _gpt3(mid)
        lo, hi = (mid, hi) if st.tflops_per_gpu < 140 else (lo, mid)
    _, st, t = _gpt3(hi)
    assert st.tflops_per_gpu == pytest.approx(140, rel=1e-9)
    assert t.days == pytest.approx(EQ4_DAYS * 1.024235, rel=1e-5)   # 34.730 days
    assert t.days == pytest.approx(34.73, abs=0.01) and abs(t.days / EQ4_DAYS - 1) < 0.025
    # the other columns from the same seconds: 1024 GPUs x 34.73 days x 24 h; 400 W each (A100 SXM TDP)
    assert t.gpu_hours == pytest.approx(1024 * t.days * 24, rel=1e-12)            # 853,543 GPU-hours
    assert t.energy_mwh == pytest.approx(t.gpu_hours * 400 / 1e6, rel=1e-12)      # 341.4 MWh
    assert t.cost is None                                                          # no price given


# ------------------------------------------------------------------ the JSON contract

def _all_plans(data):
    """Every suggestion, the recommended and the minimum viable layout of a search's JSON."""
    return data["suggestions"] + [data["recommended"], data["minimum_viable"]]


def test_every_suggestion_gains_to_train_with_the_contracts_keys():
    code, data = run_json(LLAMA_64 + ["--suggest", "--train-tokens", "15T", "--gpu-hour-price", "2.50"])
    assert code == 0
    n = data["cluster"]["num_gpus"]
    for s in _all_plans(data):
        t = s["to_train"]
        assert set(t) == KEYS and t["tokens"] == 15 * 10**12
        seconds = 15e12 / s["time"]["tokens_per_s"]                       # D/R
        assert t["days"] == pytest.approx(seconds / 86_400, rel=1e-12)
        assert t["gpu_hours"] == pytest.approx(n * seconds / 3_600, rel=1e-12)
        assert t["energy_mwh"] == pytest.approx(t["gpu_hours"] * 700 / 1e6, rel=1e-12)   # h100-80gb: 700 W TDP
        assert t["cost"] == pytest.approx(t["gpu_hours"] * 2.5, rel=1e-12)


def test_the_recommended_llama_8b_run_on_64_h100():
    """The recommendation (dp 64, ZeRO-3) runs 759,943 tokens/s: 15T tokens take 228.45 days,
    64 x 228.45 x 24 = 350,904 GPU-hours, x 0.7 kW = 245.6 MWh, x 2.50 = 877,259."""
    _, data = run_json(LLAMA_64 + ["--suggest", "--train-tokens", "15T", "--gpu-hour-price", "2.50"])
    t = data["recommended"]["to_train"]
    assert data["recommended"]["time"]["tokens_per_s"] == pytest.approx(759_943, rel=1e-5)
    assert t["days"] == pytest.approx(15e12 / 759_942.91 / 86_400, rel=1e-6) == pytest.approx(228.45, rel=1e-4)
    assert t["gpu_hours"] == pytest.approx(64 * t["days"] * 24, rel=1e-12) == pytest.approx(350_904, rel=1e-5)
    assert t["energy_mwh"] == pytest.approx(t["gpu_hours"] * 0.7 / 1e3, rel=1e-12) == pytest.approx(245.63, rel=1e-4)
    assert t["cost"] == pytest.approx(t["gpu_hours"] * 2.5, rel=1e-12) == pytest.approx(877_259, rel=1e-5)


def test_cost_is_null_without_a_price_and_to_train_absent_without_tokens():
    _, data = run_json(LLAMA_64 + ["--suggest", "--train-tokens", "15T"])
    assert all(s["to_train"]["cost"] is None and s["to_train"]["days"] > 0 for s in _all_plans(data))
    _, plain = run_json(LLAMA_64 + ["--suggest"])
    assert all("to_train" not in s for s in _all_plans(plain))


def test_one_configuration_and_the_seed_report_gain_to_train():
    _, one = run_json(LLAMA_64 + ["--tp", "2", "--train-tokens", "15T", "--gpu-hour-price", "2"])
    assert set(one["to_train"]) == KEYS
    assert one["to_train"]["days"] == pytest.approx(15e12 / one["time"]["tokens_per_s"] / 86_400, rel=1e-12)
    assert one["to_train"]["cost"] == pytest.approx(2 * one["to_train"]["gpu_hours"], rel=1e-12)
    _, seed = run_json(LLAMA_64 + ["--train-tokens", "15T"])
    assert [set(s["to_train"]) for s in seed["strategies"]] == [KEYS] * 4   # DDP, ZeRO-1, 2, 3
    _, plain = run_json(LLAMA_64 + ["--tp", "2"])
    assert "to_train" not in plain


def test_power_and_pue_scale_the_energy():
    base = LLAMA_64 + ["--tp", "2", "--train-tokens", "15T"]
    e = run_json(base)[1]["to_train"]["energy_mwh"]
    assert run_json(base + ["--gpu-power", "1 kW"])[1]["to_train"]["energy_mwh"] == pytest.approx(e * 1000 / 700)
    assert run_json(base + ["--pue", "1.3"])[1]["to_train"]["energy_mwh"] == pytest.approx(e * 1.3)


def test_no_step_time_leaves_the_time_null():
    """fp8 on an A100 has no peak rate: the run's tokens stay, its days and the rest are null."""
    _, data = run_json(LLAMA_64 + ["--gpu", "a100-80gb", "--precision", "fp8", "--tp", "2", "--train-tokens", "1T"])
    assert data["to_train"] == {"tokens": 10**12, "days": None, "gpu_hours": None, "energy_mwh": None, "cost": None}


def test_text_reports_print_days_gpu_hours_cost_and_energy():
    code, out, _ = run(LLAMA_64 + ["--suggest", "--top", "2", "--train-tokens", "15T", "--gpu-hour-price", "2.5"])
    assert code == 0
    assert "To train 15T tokens" in out and "days  GPU-hours       cost  energy MWh" in out
    assert "to train 15T tokens: 228.5 days, 350,904 GPU-hours, cost 877,259, 245.6 MWh" in out
    code, out, _ = run(LLAMA_64 + ["--tp", "2", "--train-tokens", "15T"])
    assert "GPU-hours  N*T/3600 = 64 x" in out and "GPU boards only" in out and "no price" in out


# ------------------------------------------------------------------ exit codes

@pytest.mark.parametrize(("argv", "says"), [
    (["--train-tokens", "15x"], "--train-tokens: cannot read '15x'"),
    (["--train-tokens", "1.5"], "not a whole number"),
    (["--train-tokens", "0"], "--train-tokens = '0' is out of range"),
    (["--gpu-hour-price", "-1"], "--gpu-hour-price"),
    (["--gpu-power", "700"], "--gpu-power: cannot read '700'"),
    (["--pue", "0.5"], "--pue = 0.5 is out of range"),
    (["--suggest", "--rank", "cost"], "--rank cost: give --gpu-hour-price"),
])
def test_bad_inputs_exit_2_with_one_line(argv, says):
    code, out, err = run(LLAMA_64 + argv)
    assert code == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1


def test_exit_codes_follow_the_fit_not_the_cost():
    assert run(LLAMA_64 + ["--suggest", "--train-tokens", "15T", "--json"])[0] == 0
    code, data = run_json(["plan", "--preset", "gpt3-175b", "--gpus", "8", "--suggest", "--train-tokens", "300B"])
    assert code == 1 and data["suggestions"] == []      # nothing fits on 8: nothing to cost


# ------------------------------------------------------------------ --rank cost

def test_rank_cost_orders_by_gpu_hours_and_agrees_with_throughput_at_one_batch():
    """At one global batch every legal layout takes G*s tokens per step, so GPU-hours per token
    N*T_step/(G*s) order as the step time: --rank cost and --rank throughput give the same list."""
    argv = LLAMA_64 + ["--suggest", "--top", "8", "--train-tokens", "15T", "--gpu-hour-price", "2.5"]
    _, cost = run_json(argv + ["--rank", "cost"])
    _, thr = run_json(argv + ["--rank", "throughput"])
    hours = [s["to_train"]["gpu_hours"] for s in cost["suggestions"]]
    assert hours == sorted(hours)
    key = lambda s: (s["tp"], s["pp"], s["dp"], s["cp"], s["zero"], s["recompute"], s["virtual_stages"])
    assert [s["to_train"]["gpu_hours"] for s in thr["suggestions"]] == pytest.approx(hours, rel=1e-9)
    assert cost["rank_order"].startswith("estimated cost to train")
    first = cost["suggestions"][0]
    assert first["rank_reason"].startswith(f"cost ~{first['to_train']['cost']:,.0f} (")
    assert key(first) == key(thr["suggestions"][0])


def test_rank_cost_without_tokens_costs_a_billion_tokens():
    code, out, _ = run(LLAMA_64 + ["--suggest", "--top", "1", "--rank", "cost", "--gpu-hour-price", "3"])
    assert code == 0 and "to train 1B tokens" in out


# ------------------------------------------------------------------ spec file and JSON API

def test_a_spec_file_and_the_api_give_the_flags_answer(tmp_path):
    flags = LLAMA_64 + ["--tp", "2", "--train-tokens", "15T", "--gpu-hour-price", "2.5", "--pue", "1.2",
                        "--gpu-power", "650 W"]
    _, by_flags = run_json(flags)
    code, toml, _ = run(["presets", "show", "llama3.1-8b", "--toml"])
    spec = tmp_path / "run.toml"
    spec.write_text(toml.replace("[training]\n", '[training]\ntrain_tokens = "15T"\n', 1)
                    + '\n[cluster]\ngpu = "h100-80gb"\nnum_gpus = 64\ngpu_hour_price = 2.5\npue = 1.2\n')
    _, by_file = run_json(["plan", "--spec", str(spec), "--tp", "2", "--gpu-power", "650 W"])
    assert by_file["to_train"] == by_flags["to_train"]
    body = {"preset": "llama3.1-8b", "gpus": 64, "tp": 2, "train_tokens": "15T", "gpu_hour_price": 2.5,
            "pue": 1.2, "gpu_power": "650 W"}
    assert json.loads(respond(build_request("plan", body)).text)["to_train"] == by_flags["to_train"]
    body["train_tokens"] = 15 * 10**12          # the API also takes the count as a number
    assert json.loads(respond(build_request("plan", body)).text)["to_train"] == by_flags["to_train"]
