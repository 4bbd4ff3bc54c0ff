"""Field checks shared by the specs: one message shape, naming the field and the fix."""
import math

from fitplan.errors import SpecError

# Sizes beyond these are typos, not models: they would overflow nothing, but no one plans them.
MAX_COUNT = 10**18


def positive_int(owner: str, name: str, value, *, maximum: int = MAX_COUNT) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{owner}.{name} must be a whole number, got {value!r}")
    if value < 1:
        raise SpecError(f"{owner}.{name} must be >= 1, got {value}")
    if value > maximum:
        raise SpecError(f"{owner}.{name} = {value} is absurdly large (limit {maximum:,}); check the value")


def positive_number(owner: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{owner}.{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"{owner}.{name} must be a positive finite number, got {value!r}")
