"""Search speed: candidates per second, wall time, peak memory; and whole-command times.

Space: tp, pp = every divisor of N, cp in 1..8, micro-batch 1..16, virtual stages 1..4,
ZeRO 0-3, sequence parallel off/on, recompute none/selective/full; global batch not fixed,
so every legal candidate is evaluated. Models: GPT-3 175B and Llama 3.1 405B on H100 80GB.

Baselines measured in the same run: the scalar path (one ParallelConfig at a time through
fitplan.memory.breakdown.evaluate, the exact explanation path) and a bare interpreter start.
Run: python bench/search.py  (prints a table; nothing is asserted)
     python bench/search.py --compare REV  (the same searches on git revision REV's sources, in a
                                            subprocess, then on this checkout's: before/after)
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--src" in sys.argv:   # another checkout's sources (the --compare baseline)
    sys.path.insert(0, sys.argv[sys.argv.index("--src") + 1])
else:
    sys.path.insert(0, str(ROOT / "src"))

from fitplan import presets  # noqa: E402
from fitplan.memory.breakdown import Setup, evaluate  # noqa: E402
from fitplan.search import SearchSpace, divisors, search  # noqa: E402
from fitplan.specs import ClusterSpec, ParallelConfig, TrainingSpec  # noqa: E402


def setup_for(model_name: str, n: int) -> Setup:
    preset = presets.model(model_name)
    gpu = presets.gpu("h100-80gb")
    return Setup(preset.model, TrainingSpec(seq_len=preset.seq_len, recipe=presets.recipe("mixed-adam")),
                 ClusterSpec(gpu=gpu, num_gpus=n, gpus_per_node=8, reserve_bytes=gpu.default_reserve_bytes))


def full_space(n: int) -> SearchSpace:
    divs = divisors(n)
    return SearchSpace(tp=divs, pp=divs, cp=tuple(c for c in range(1, 9) if n % c == 0),
                       micro_batches=tuple(range(1, 17)), virtual_stages=(1, 2, 3, 4))


def time_search(setup, space, repeats=3):
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = search(setup, space, top=5)
        walls.append(time.perf_counter() - t0)
    tracemalloc.start()
    search(setup, space, top=5)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, walls, peak


def scalar_rate(setup, seconds=1.0) -> float:
    """Configurations per second through the exact one-at-a-time path."""
    n, count, t0 = setup.cluster.num_gpus, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        evaluate(setup, ParallelConfig(tp=8, pp=8, dp=n // 64))
        count += 1
    return count / (time.perf_counter() - t0)


def command_times(argv, repeats=5):
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, capture_output=True, check=False)
        walls.append(time.perf_counter() - t0)
    return walls


def fmt(walls):
    return f"median {statistics.median(walls):.3f} s (min {min(walls):.3f}, max {max(walls):.3f})"


CASES = [(model, n) for model in ("gpt3-175b", "llama3.1-405b") for n in (1024, 4096, 16384)]


def rates() -> dict:
    """Candidates per second of each case's full search (median of 3)."""
    out = {}
    for model, n in CASES:
        result, walls, _ = time_search(setup_for(model, n), full_space(n))
        out[f"{model} {n}"] = result.considered / statistics.median(walls)
    return out


def compare(rev: str) -> None:
    """The same searches on revision rev (its src/ from git archive, in a subprocess) and here,
    interleaved case by case is not possible across processes, so each side runs its cases
    back to back; the table gives both rates and their ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        before = json.loads(subprocess.run([sys.executable, __file__, "--src", f"{tmp}/src", "--rates"],
                                           capture_output=True, text=True, check=True).stdout)
    after = rates()
    print(f"{'case':<22} {'before cand/s':>14} {'after cand/s':>14} {'after/before':>13}   (before: {rev})")
    for case in after:
        print(f"{case:<22} {before[case]:>14,.0f} {after[case]:>14,.0f} {after[case] / before[case]:>13.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compare", metavar="REV", help="also time git revision REV's sources: before/after")
    parser.add_argument("--src", help=argparse.SUPPRESS)
    parser.add_argument("--rates", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rates:
        print(json.dumps(rates()))
        return
    if args.compare:
        compare(args.compare)
        print()
    print(f"{'model':<15} {'GPUs':>6} {'candidates':>11} {'fit':>8} {'wall s (median)':>16} {'noise range s':>16} "
          f"{'cand/s':>12} {'peak MiB':>9} {'vs scalar':>10}")
    for model in ("gpt3-175b", "llama3.1-405b"):
        for n in (1024, 4096, 16384):
            setup = setup_for(model, n)
            result, walls, peak = time_search(setup, full_space(n))
            rate = result.considered / statistics.median(walls)
            base = scalar_rate(setup, 0.5)
            print(f"{model:<15} {n:>6} {result.considered:>11,} {result.fit:>8,} {statistics.median(walls):>16.3f} "
                  f"{min(walls):>7.3f}-{max(walls):<8.3f} {rate:>12,.0f} {peak / 2**20:>9.1f} {rate / base:>9.0f}x")
    print()
    bare = command_times([sys.executable, "-c", "pass"])
    print(f"interpreter start (baseline)                     {fmt(bare)}")
    code = ("import sys; sys.path.insert(0, 'src'); sys.path.insert(0, 'bench'); import search as b; "
            "from fitplan.search import search; search(b.setup_for('llama3.1-405b', 16384), b.full_space(16384))")
    walls = command_times([sys.executable, "-c", code])
    print(f"16,384-GPU full search, Llama 3.1 405B, whole process {fmt(walls)}  "
          f"({statistics.median(walls) / statistics.median(bare):.1f}x interpreter start)")
    for n in (8, 16, 32):
        argv = [sys.executable, "tools/memory_planner.py", "--preset", "gpt3-175b", "--gpus", str(n), "--suggest"]
        if n > 8:
            argv += ["--top", "4" if n == 16 else "5"]
        walls = command_times(argv)
        print(f"seed: --gpus {n:<3} --suggest                          {fmt(walls)}  "
              f"({statistics.median(walls) / statistics.median(bare):.1f}x interpreter start)")


if __name__ == "__main__":
    main()
