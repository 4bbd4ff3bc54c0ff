"""Run the CLI and file fuzzers with many more cases than CI does, and print the counts.

CI runs 3,000 CLI argument vectors and 1,600 file documents (derandomized). This runs the
same tests with FITPLAN_FUZZ_EXAMPLES (default 30,000) and a random seed.
Run: python bench/fuzz.py [EXAMPLES]
"""
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
    env = {**os.environ, "FITPLAN_FUZZ_EXAMPLES": str(examples), "HYPOTHESIS_PROFILE": "dev",
           "PYTHONPATH": str(ROOT / "src")}
    files = int(examples * (600 + 600 + 400) / 3000)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                           "tests/properties/test_cli_fuzz.py", "tests/properties/test_file_fuzz.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    print(proc.stdout[-2000:])
    print(f"{examples:,} CLI argument vectors + {files:,} file documents, random seed: "
          f"{'all passed' if proc.returncode == 0 else 'FAILURES above'} in {wall:,.0f} s")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
