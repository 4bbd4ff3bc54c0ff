"""The time model: compute, communication, pipeline bubble, assembled into a step time.

compute.py        FLOPs / (peak x efficiency), MFU, HFU, the optimizer step's traffic
gemm.py           GEMM time by shape (the fitted curve) and the rates a recipe's GEMMs run at
layer_gemms.py    a layer's GEMMs on one GPU at the stage's degrees
layer_rates.py    a stage's sustained GEMM efficiencies and memory-bound seconds per layer
elementwise.py    the memory-bound kernels' traffic and the fp8 casts
work.py           what a micro-batch computes on a stage: FLOPs by class, recompute, the pacing rank
passes.py         a micro-batch's forward and backward, one layer's, the optimizer step
comm.py           collectives as NCCL runs them (ring and tree, per protocol, over the nodes a group
                  spans) and point-to-point; which link tier a group uses
traffic.py        what each parallel axis sends per step, and what overlaps with compute
axes.py           tensor, context and pipeline parallel time; the groups' placement
expert.py         expert parallel: the MoE all-to-alls
data_parallel.py  gradient reductions and parameter gathers, ZeRO 0-3, hybrid sharding
pipeline.py       the bubble (Narayanan et al. Sec. 2.2) and micro-batch counts
offload.py        host-link traffic and the CPU optimizer step under offload
calibration.py    the end-to-end constants (what a framework does around the components) and their priors
fitted.py         their fitted values and cross-validated residuals (bench/fidelity.py --write)
overheads.py      compute slowed by hidden communication, host time per layer pass, stragglers
step.py           the assembler: step_time (RAW or Trace), the parts and the rates
breakdown.py      evaluate_step (one configuration, explained) and per_layer
to_train.py       days, GPU-hours, cost and energy to train
uncertainty.py    the 80% band from the cross-validated residuals

The names below are importable from here, each loaded when first asked for (PEP 562), so a
caller that needs one module (compute's peak rates, calibration's constants) does not load
the whole time model.
"""
_EXPORTS = {"AxisComm": "breakdown", "StageLayers": "breakdown", "StepBreakdown": "breakdown",
            "evaluate_step": "breakdown", "per_layer": "breakdown", "step_time": "step",
            "DDP_BUCKET_BYTES": "traffic"}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(f"fitplan.timing.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fitplan.timing' has no attribute {name!r}")
