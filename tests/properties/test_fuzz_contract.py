"""The front ends' contract under fuzzing (issue 16), on a CI-sized run: every command line
ends in exit 0 or 1 with an answer, or exit 2 with exactly one line on stderr; --json output is
JSON without NaN; nothing is written besides the requested output, no input and no link's
target is changed; every command is drawn, validate, calibrate and serve with stand-ins for
their measuring and serving (fuzz_cases.stand_ins); every case answers within
fuzz_cases.TIME_BOUND_S. Every API request is a 200 with JSON or a 400 with one line, never a
5xx. The cases come from the grammar itself (tests/properties/fuzz_cases.py); bench/fuzz.py
runs thousands more and prints the counts by outcome.
"""
import os

import pytest
from hypothesis import HealthCheck, given, settings

from tests.properties import fuzz_cases as F

CLI_EXAMPLES = int(os.environ.get("FITPLAN_FUZZ_EXAMPLES", "400"))
API_EXAMPLES = int(os.environ.get("FITPLAN_FUZZ_API_EXAMPLES", "300"))


@pytest.fixture(scope="module")
def folder():
    with F.case_folder() as f:
        yield f


def test_the_command_line_keeps_its_contract(folder):
    @settings(max_examples=CLI_EXAMPLES, suppress_health_check=list(HealthCheck), deadline=None, database=None)
    @given(F.cli_cases(folder))
    def case(argv):
        outcome, detail = F.run_cli(argv, folder)
        assert outcome in F.GOOD, (outcome, detail)
    with F.stand_ins():
        case()


@settings(max_examples=API_EXAMPLES, suppress_health_check=list(HealthCheck), deadline=None, database=None)
@given(F.api_cases())
def test_the_api_keeps_its_contract(case):
    endpoint, body = case
    outcome, detail = F.run_api(endpoint, body)
    assert outcome in F.GOOD, (outcome, detail)
