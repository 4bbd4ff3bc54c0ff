"""The time model: compute, communication, pipeline bubble, assembled into a step time.

compute.py   FLOPs / (peak x efficiency), MFU, HFU, the optimizer step
gemm.py      GEMM time by shape (the fitted curve), a layer's GEMMs, memory-bound kernels, fp8 casts
comm.py      collectives as NCCL runs them (ring and tree, per protocol, over the nodes a group
             spans) and point-to-point; which link tier a group uses
traffic.py   what each parallel axis sends per step, and what overlaps with compute
pipeline.py  the bubble (Narayanan et al. Sec. 2.2) and micro-batch counts
step.py      the assembler: step_time (RAW or Trace), evaluate_step (one config) and per_layer
"""
from fitplan.timing.step import AxisComm, StageLayers, StepBreakdown, evaluate_step, per_layer, step_time
from fitplan.timing.traffic import DDP_BUCKET_BYTES

__all__ = ["AxisComm", "DDP_BUCKET_BYTES", "StageLayers", "StepBreakdown", "evaluate_step", "per_layer",
           "step_time"]
