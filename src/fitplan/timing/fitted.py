"""The end-to-end fit, as bench/fidelity.py --write printed it: the constants (fitplan.timing.calibration)
and the cross-validated residuals the error band is built from (fitplan.timing.uncertainty).
Generated; tests/unit/test_calibration.py checks it equals a fresh fit on bench/calibration/."""


VALUES = {
    'clock_ampere': 0.9442,
    'clock_hopper': 0.8547,
    'clock_blackwell': 0.7927,
    'clock_blackwell_ultra': 0.9126,
    'attention_scale': 0.6975,
    'elementwise_scale': 1.887,
    'moe_traffic': 2.632,
    'sm_sharing': 0.1216,
    'layer_overhead': 0.0003,
    'moe_sync_overhead': 0.0003557,
    'collective_overhead': 1.048e-05,
    'comm_efficiency': 0.9124,
    'a2a_efficiency': 0.7919,
    'straggler_cv': 0.01331,
}

BAND = {
    "runs": 354, "alpha": 0.07, "q_low": -0.1866, "q_high": 0.2673,
    "support": {
        'architecture': {'ampere': 18, 'blackwell': 132, 'blackwell-ultra': 119, 'hopper': 85},
        'precision': {'bf16': 66, 'fp8': 101, 'mxfp8': 154, 'nvfp4': 33},
        'kernels': {'fused': 354},
        'power limit': {'the TDP': 354},
        'framework': {'fsdp': 20, 'megatron-lm': 18, 'nemo': 316},
    },
}
