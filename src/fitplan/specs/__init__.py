"""Specs are data: frozen, keyword-only dataclasses validated on construction."""
from fitplan.specs.cluster import ClusterSpec, GpuSpec, LinkSpec
from fitplan.specs.model import Mlp, ModelSpec, Norm, Position, QkNorm
from fitplan.specs.parallel import Offload, ParallelConfig, Recompute, ZeroStage
from fitplan.specs.training import Recipe, TrainingSpec

__all__ = ["ClusterSpec", "GpuSpec", "LinkSpec", "Mlp", "ModelSpec", "Norm", "Position", "QkNorm",
           "Offload", "ParallelConfig", "Recompute", "ZeroStage", "Recipe", "TrainingSpec"]
