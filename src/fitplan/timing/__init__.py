"""The time model: compute, communication, pipeline bubble, assembled into a step time.

compute.py   FLOPs / (peak x efficiency), MFU, HFU, the optimizer step
gemm.py      GEMM time by shape (the fitted curve), a layer's GEMMs, memory-bound kernels, fp8 casts
comm.py      alpha-beta ring collectives and point-to-point; which link tier a group uses
traffic.py   what each parallel axis sends per step, and what overlaps with compute
pipeline.py  the bubble (Narayanan et al. Sec. 2.2) and micro-batch counts
step.py      the assembler: step_time (RAW or Trace) and evaluate_step (one config)
"""
from fitplan.timing.step import AxisComm, StepBreakdown, evaluate_step, step_time
from fitplan.timing.traffic import DDP_BUCKET_BYTES, DpOverlap

__all__ = ["AxisComm", "DDP_BUCKET_BYTES", "DpOverlap", "StepBreakdown", "evaluate_step", "step_time"]
