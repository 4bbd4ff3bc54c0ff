#!/usr/bin/env python3
"""The seed command: python tools/memory_planner.py --preset gpt3-175b --gpus 8 [--suggest --top 4].

A thin wrapper over `fitplan plan`; it accepts the seed's flags (--preset, --gpus,
--suggest, --top) and every other `fitplan plan` flag.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "src"))

from fitplan.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["plan", *sys.argv[1:]]))
