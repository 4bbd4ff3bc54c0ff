"""Golden outputs of the seed commands and a few others. A numerical or wording change
fails here until it is reviewed: rerun `pytest tests/golden --update-golden` and read the diff."""
import io

import pytest

from fitplan.cli import main

SEED = ["plan", "--preset", "gpt3-175b"]
CASES = {
    "seed_8.txt": (SEED + ["--gpus", "8"], 1),
    "seed_8.json": (SEED + ["--gpus", "8", "--json"], 1),
    "suggest_8.txt": (SEED + ["--gpus", "8", "--suggest", "--top", "4"], 1),
    "suggest_16_top4.txt": (SEED + ["--gpus", "16", "--suggest", "--top", "4"], 0),
    "suggest_16_top4.md": (SEED + ["--gpus", "16", "--suggest", "--top", "4", "--format", "markdown"], 0),
    "suggest_16.json": (SEED + ["--gpus", "16", "--suggest", "--json"], 0),
    "suggest_32_top5.txt": (SEED + ["--gpus", "32", "--suggest", "--top", "5"], 0),
    "throughput_64.txt": (SEED + ["--gpus", "64", "--suggest", "--top", "3", "--rank", "throughput"], 0),
    "explicit_16.txt": (SEED + ["--gpus", "16", "--tp", "8", "--pp", "2", "--sequence-parallel",
                                "--recompute", "selective"], 0),
    "llama3.1-70b_64xh100.txt": (["plan", "--preset", "llama3.1-70b", "--gpus", "64", "--suggest", "--top", "3"], 0),
    "mixtral-8x7b_16.txt": (["plan", "--preset", "mixtral-8x7b", "--gpus", "16", "--suggest", "--top", "3"], 0),
    "deepseek-v3_2048_flash.json": (["plan", "--preset", "deepseek-v3", "--gpus", "2048", "--suggest", "--top", "2",
                                     "--attention-kernel", "flash", "--json"], 0),
    "compare_dense100b_64.txt": (["compare", "--preset", "dense-100b", "--gpus", "64"], 0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_matches_golden(name, golden):
    argv, code = CASES[name]
    out = io.StringIO()
    assert main(argv, out=out) == code
    golden.check(name, out.getvalue())
