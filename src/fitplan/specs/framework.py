"""A training framework's defaults: what it does where the user sets nothing.

A profile (fitplan.presets.frameworks) names values for training fields (the attention kernel, the
kernel family, CUDA graphs, the loss, the optimizer implementation, buckets, prefetch, the allocator)
and for the configuration's settings (which communication overlaps). `--framework NAME` applies
them wherever no flag or spec-file key sets the field (fitplan.resolve), and each one applied is
printed under `assumed` with the framework file it comes from.
"""

from fitplan.record import record
from fitplan.specs.parallel import SETTINGS
from fitplan.specs.training import TrainingSpec


@record(slots=True)
class Default:
    """One default: the field's value, and where the framework sets it (repository path@commit, symbol)."""
    value: object
    source: str


@record(slots=True)
class Framework:
    name: str
    description: str           # what it is, in a line
    training: dict             # TrainingSpec field -> Default
    config: dict               # ParallelConfig SETTINGS field -> Default
    notes: tuple = ()          # what the profile does not set, and why

    def __post_init__(self) -> None:
        names = set(TrainingSpec.__dataclass_fields__)
        assert set(self.training) <= names, set(self.training) - names
        assert set(self.config) <= set(SETTINGS), set(self.config) - set(SETTINGS)
