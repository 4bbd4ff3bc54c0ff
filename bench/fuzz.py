"""Fuzz both front ends with many cases and print the counts by outcome.

The cases are tests/properties/fuzz_cases.py's: drawn from the CLI's grammar (its parser) and
the API's schema, with hostile values, run in-process in a scratch folder under a time bound.
CI runs a few hundred of each (tests/properties/test_fuzz_contract.py, asserting the contract);
this runs thousands with a random seed and prints every case that broke it.

Run:  python bench/fuzz.py [CLI_CASES] [API_CASES] [--src PATH]
      (--src: the fitplan sources to fuzz, default this checkout's src/; e.g. an older checkout's
      src to count its outcomes before a change.) The spec-file fuzzer runs on its own:
      FITPLAN_FUZZ_EXAMPLES=20000 python -m pytest tests/properties/test_file_fuzz.py
"""
import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cli", nargs="?", type=int, default=5000)
    p.add_argument("api", nargs="?", type=int, default=2000)
    p.add_argument("--src", default=str(ROOT / "src"))
    args = p.parse_args()
    sys.path.insert(0, args.src)
    sys.path.insert(1, str(ROOT))
    from hypothesis import HealthCheck, given, settings

    from tests.properties import fuzz_cases as F

    found: list = []

    with F.case_folder() as folder, F.stand_ins():
        cli, t0 = Counter(), time.perf_counter()
        commands, outputs = Counter(), Counter()

        @settings(max_examples=args.cli, suppress_health_check=list(HealthCheck), deadline=None, database=None)
        @given(F.cli_cases(folder))
        def cli_case(argv):
            outcome, detail = F.run_cli(argv, folder)
            cli[outcome] += 1
            commands[argv[0]] += 1
            outputs.update(f"{argv[0]} {a}" for a in set(argv) if a in F.OUTPUT_FLAGS)
            if outcome not in F.GOOD:
                found.append(("cli", outcome, f"{detail}\n    argv: {argv}"))

        cli_case()
        cli_s = time.perf_counter() - t0

    api, t0 = Counter(), time.perf_counter()

    @settings(max_examples=args.api, suppress_health_check=list(HealthCheck), deadline=None, database=None)
    @given(F.api_cases())
    def api_case(case):
        outcome, detail = F.run_api(*case)
        api[outcome] += 1
        if outcome not in F.GOOD:
            found.append(("api", outcome, f"{detail}\n    request: {case}"))

    api_case()
    api_s = time.perf_counter() - t0
    print(f"fitplan from {args.src}")
    print(f"CLI: {sum(cli.values()):,} cases in {cli_s:,.0f} s: " + ", ".join(f"{k} {v:,}" for k, v in sorted(cli.items())))
    print("CLI cases by command: " + ", ".join(f"{k} {v:,}" for k, v in sorted(commands.items())))
    print("CLI cases by output flag: " + ", ".join(f"{k} {v:,}" for k, v in sorted(outputs.items())))
    print(f"API: {sum(api.values()):,} cases in {api_s:,.0f} s: " + ", ".join(f"{k} {v:,}" for k, v in sorted(api.items())))
    for where, outcome, detail in found[:40]:
        print(f"  {where} {outcome}: {detail}")
    bad = sum(v for k, v in (cli + api).items() if k not in F.GOOD)
    print(f"{bad:,} cases broke the contract")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
