"""Search speed: candidates per second, wall and CPU time, peak memory; and whole-command times.

Space: tp, pp = every divisor of N, cp in 1..8, micro-batch 1..16, virtual stages 1..4,
ZeRO 0-3, sequence parallel off/on, recompute none/selective/full; global batch not fixed,
so every legal candidate is evaluated. Models: GPT-3 175B and Llama 3.1 405B on H100 80GB.

Baselines measured in the same run: the scalar path (one ParallelConfig at a time through
fitplan.memory.breakdown.evaluate, the exact explanation path) and a bare interpreter start.
CPU seconds are the process's user + system time (time.process_time inside a search; a
child's rusage for a whole command), which a busy machine inflates less than wall time.

Run: python bench/search.py  (prints tables; nothing is asserted)
     python bench/search.py --compare REV  (also git revision REV's tree, extracted to a temporary
         folder, in paired runs: REV and this checkout alternate, in ABBA order, so load that comes
         and goes falls on both; each ratio is the median over the pairs of this checkout's figure
         over REV's, for the searches' candidates/s and the commands' CPU seconds; the commands twice:
         from the trees as they are, where a machine that sets PYTHONDONTWRITEBYTECODE=1 compiles
         every module in every run, and from copies whose bytecode was compiled beforehand)
     python bench/search.py --compare REV --instructions  (instead of times: the instructions each
         search and each command executes, counted by valgrind's callgrind on both trees; the same
         count whatever else the machine runs, so the ratio needs no pairing. A search's count is
         (three searches - one) / 2 in one process, without the interpreter's start and imports;
         a command's is the whole process, imports and bytecode compilation included)
"""
import argparse
import json
import os
import resource
import shutil
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

CASES = [(model, n) for model in ("gpt3-175b", "llama3.1-405b") for n in (1024, 4096, 16384)]
# Whole commands, as a user types them: the seed command and two large searches.
COMMANDS = [(f"seed --gpus {n} --suggest --top 4",
             ["tools/memory_planner.py", "--preset", "gpt3-175b", "--gpus", str(n), "--suggest", "--top", "4"])
            for n in (8, 16, 32)] + [
    ("llama3.1-405b --gpus 16384 --suggest", ["tools/memory_planner.py", "--preset", "llama3.1-405b",
                                              "--gpus", "16384", "--suggest"]),
    ("deepseek-v3 --gpus 2048 --suggest", ["tools/memory_planner.py", "--preset", "deepseek-v3",
                                           "--gpus", "2048", "--suggest"])]


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
    """(result, wall seconds, CPU seconds) of `repeats` searches after a warm-up one."""
    search(setup, space, top=5)
    walls, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        result = search(setup, space, top=5)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return result, walls, cpus


def peak_bytes(setup, space) -> int:
    tracemalloc.start()
    search(setup, space, top=5)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def scalar_rate(setup, seconds=1.0) -> float:
    """Configurations per second through the exact one-at-a-time path."""
    n, count, t0 = setup.cluster.num_gpus, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        evaluate(setup, ParallelConfig(tp=8, pp=8, dp=n // 64))
        count += 1
    return count / (time.perf_counter() - t0)


def rates() -> dict:
    """Each case's full search: candidates, median wall and CPU seconds (of 3, after a warm-up)."""
    out = {}
    for model, n in CASES:
        result, walls, cpus = time_search(setup_for(model, n), full_space(n))
        out[f"{model} {n}"] = {"candidates": result.considered, "fit": result.fit,
                               "wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}
    return out


def run_command(tree: Path, argv) -> tuple[float, float]:
    """(wall, CPU) seconds of one command run in `tree` (CPU: the child's user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *argv], cwd=tree, capture_output=True, check=False,
                   env={**os.environ, "PYTHONPATH": str(tree / "src")})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def worker_rates(tree: Path) -> dict:
    """rates() of the sources in tree/src, in a fresh interpreter."""
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--src", str(tree / "src"), "--rates"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def paired(rev_tree: Path, pairs: int, command_pairs: int) -> None:
    """The searches and the commands on REV's tree and this one, alternating in ABBA order."""
    here = ROOT
    runs = {"before": [], "after": []}
    for i in range(pairs):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for side in order:
            runs[side].append(worker_rates(rev_tree if side == "before" else here))
    print(f"Searches, {pairs} paired runs (each the median of 3 searches)")
    print(f"{'case':<22} {'candidates':>10} {'before cand/s':>14} {'after cand/s':>14} {'before CPU s':>13} "
          f"{'after CPU s':>12} {'ratio':>6}")
    for case in runs["after"][0]:
        b_rate = [r[case]["candidates"] / r[case]["wall_s"] for r in runs["before"]]
        a_rate = [r[case]["candidates"] / r[case]["wall_s"] for r in runs["after"]]
        ratio = statistics.median(a / b for a, b in zip(a_rate, b_rate))
        print(f"{case:<22} {runs['after'][0][case]['candidates']:>10,} {statistics.median(b_rate):>14,.0f} "
              f"{statistics.median(a_rate):>14,.0f} "
              f"{statistics.median(r[case]['cpu_s'] for r in runs['before']):>13.4f} "
              f"{statistics.median(r[case]['cpu_s'] for r in runs['after']):>12.4f} {ratio:>5.2f}x")
    print("  ratio: after/before candidates per second, the median over the pairs")
    print()
    cached = "" if os.environ.get("PYTHONDONTWRITEBYTECODE") else (
        " (this interpreter writes bytecode: after the first run each tree's is cached)")
    print(f"Commands, {command_pairs} paired runs, as the trees are{cached}")
    paired_commands(rev_tree, here, command_pairs)
    with tempfile.TemporaryDirectory() as tmp:
        trees = [compiled_copy(tree, Path(tmp) / side) for tree, side in ((rev_tree, "before"), (here, "after"))]
        print()
        print(f"Commands, {command_pairs} paired runs, each tree's bytecode compiled beforehand (compileall, as pip "
              f"installs a package)")
        paired_commands(*trees, command_pairs)


def compiled_copy(tree: Path, to: Path) -> Path:
    """A copy of tree's src/ and tools/ with every module's bytecode written (python -m compileall): a command
    then reads the cached bytecode instead of compiling its modules, as it does from a pip install or once any
    run has written __pycache__ (this machine's PYTHONDONTWRITEBYTECODE=1 stops that)."""
    for part in ("src", "tools"):
        shutil.copytree(tree / part, to / part)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(to / "src"), str(to / "tools")],
                   capture_output=True, check=True)
    return to


def paired_commands(before: Path, after: Path, pairs: int) -> None:
    """COMMANDS on two trees, alternating in ABBA order; the CPU ratio is the median over the pairs."""
    print(f"{'command':<38} {'before CPU s':>12} {'after CPU s':>12} {'before wall s':>14} {'after wall s':>13} "
          f"{'CPU ratio':>10}")
    for name, argv in COMMANDS:
        got = {"before": [], "after": []}
        for i in range(pairs):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            for side in order:
                got[side].append(run_command(before if side == "before" else after, argv))
        ratio = statistics.median(a[1] / b[1] for a, b in zip(got["after"], got["before"]))
        med = lambda side, k: statistics.median(x[k] for x in got[side])
        print(f"{name:<38} {med('before', 1):>12.3f} {med('after', 1):>12.3f} {med('before', 0):>14.3f} "
              f"{med('after', 0):>13.3f} {ratio:>9.2f}x")
    print("  CPU ratio: after/before CPU seconds (user + system), the median over the pairs; below 1 is faster")


def instructions(argv, cwd: Path, src: Path) -> int:
    """Instructions (callgrind's Ir) a Python process executes: argv after the interpreter."""
    import re
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (callgrind)")
    python = os.path.realpath(sys.executable)   # the interpreter itself, not a launcher script
    # one BLAS thread and a fixed hash seed: callgrind counts every thread, and OpenBLAS's idle threads spin for as
    # long as the scheduler lets them, which moved a command's count by about 2% from one run to the next
    env = {**os.environ, "PYTHONPATH": str(src), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "PYTHONHASHSEED": "0"}
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, *argv], cwd=cwd,
                         capture_output=True, text=True, env=env).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


def counted(rev_tree: Path) -> None:
    """Each search's and command's instructions on REV's tree and this one, and their ratio."""
    me = str(Path(__file__).resolve())
    print(f"{'search':<22} {'before M instr':>15} {'after M instr':>14} {'ratio':>6}")
    for model, n in CASES:
        got = []
        for tree in (rev_tree, ROOT):
            run = lambda k: instructions([me, "--src", str(tree / "src"), "--count", model, str(n), str(k)], tree,
                                         tree / "src")
            got.append((run(3) - run(1)) / 2)
        print(f"{model + ' ' + str(n):<22} {got[0] / 1e6:>15,.0f} {got[1] / 1e6:>14,.0f} {got[1] / got[0]:>5.2f}x")
    print(f"{'command':<38} {'before M instr':>15} {'after M instr':>14} {'ratio':>6}")
    for name, argv in [("interpreter start", ["-c", "pass"])] + COMMANDS:
        got = [instructions(argv, tree, tree / "src") for tree in (rev_tree, ROOT)]
        print(f"{name:<38} {got[0] / 1e6:>15,.0f} {got[1] / 1e6:>14,.0f} {got[1] / got[0]:>5.2f}x")
    print("  ratio: after/before instructions; below 1 is fewer")


def table() -> None:
    print(f"{'model':<15} {'GPUs':>6} {'candidates':>11} {'fit':>8} {'wall s':>8} {'noise range s':>15} "
          f"{'CPU s':>7} {'cand/s':>12} {'peak MiB':>9} {'vs scalar':>10}")
    for model, n in CASES:
        setup, space = setup_for(model, n), full_space(n)
        result, walls, cpus = time_search(setup, space)
        rate = result.considered / statistics.median(walls)
        base = scalar_rate(setup, 0.5)
        print(f"{model:<15} {n:>6} {result.considered:>11,} {result.fit:>8,} {statistics.median(walls):>8.4f} "
              f"{min(walls):>7.4f}-{max(walls):<7.4f} {statistics.median(cpus):>7.4f} {rate:>12,.0f} "
              f"{peak_bytes(setup, space) / 2**20:>9.1f} {rate / base:>9.0f}x")
    print("  wall and CPU s: the median of 3 searches after a warm-up; cand/s: candidates over the median wall")
    print()
    bare = [run_command(ROOT, ["-c", "pass"]) for _ in range(5)]
    print(f"{'command (median of 5)':<38} {'wall s':>8} {'CPU s':>8}")
    print(f"{'interpreter start':<38} {statistics.median(w for w, _ in bare):>8.3f} "
          f"{statistics.median(c for _, c in bare):>8.3f}")
    for name, argv in COMMANDS:
        got = [run_command(ROOT, argv) for _ in range(5)]
        print(f"{name:<38} {statistics.median(w for w, _ in got):>8.3f} {statistics.median(c for _, c in got):>8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compare", metavar="REV", help="also run git revision REV's tree, paired with this one")
    parser.add_argument("--pairs", type=int, default=3, help="paired search runs with --compare (default 3)")
    parser.add_argument("--command-pairs", type=int, default=7, help="paired command runs with --compare (default 7)")
    parser.add_argument("--src", help=argparse.SUPPRESS)
    parser.add_argument("--rates", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--instructions", action="store_true",
                        help="with --compare: count instructions (valgrind) instead of timing")
    parser.add_argument("--count", nargs=3, help=argparse.SUPPRESS)   # MODEL N K: run K searches, for --instructions
    args = parser.parse_args()
    if args.rates:
        print(json.dumps(rates()))
        return
    if args.count:
        model, n, k = args.count[0], int(args.count[1]), int(args.count[2])
        setup, space = setup_for(model, n), full_space(n)
        for _ in range(k):
            search(setup, space, top=5)
        return
    if args.instructions:
        if not args.compare:
            parser.error("--instructions needs --compare REV")
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "archive", args.compare], cwd=ROOT, capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            print(f"Instructions, {args.compare} (before) and this checkout (after)")
            counted(Path(tmp))
        return
    table()
    if args.compare:
        print()
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "archive", args.compare], cwd=ROOT, capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            print(f"Paired against {args.compare} (before) and this checkout (after)")
            paired(Path(tmp), args.pairs, args.command_pairs)


if __name__ == "__main__":
    main()
