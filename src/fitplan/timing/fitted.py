"""The end-to-end fit, as bench/fidelity.py --write printed it: the constants (fitplan.timing.calibration)
and the cross-validated residuals the error band is built from (fitplan.timing.uncertainty).
Generated; tests/unit/test_calibration.py checks it equals a fresh fit on bench/calibration/."""








VALUES = {
    'clock_ampere': 0.9208,
    'clock_hopper': 0.888,
    'clock_blackwell': 0.9359,
    'clock_blackwell_ultra': 1.048,
    'attention_scale': 0.6707,
    'elementwise_scale': 1.37,
    'moe_traffic': 2.8,
    'sm_sharing': 0.1287,
    'layer_overhead': 0.0003,
    'moe_sync_overhead': 0.00137,
    'collective_overhead': 1.013e-05,
    'comm_efficiency': 0.9047,
    'a2a_efficiency': 0.8044,
    'straggler_cv': 0.01059,
}

BAND = {
    "runs": 292, "alpha": 0.07, "q_low": -0.2632, "q_high": 0.4052,
    "support": {
        'architecture': {'ampere': 18, 'blackwell': 109, 'blackwell-ultra': 91, 'hopper': 74},
        'precision': {'bf16': 63, 'fp8': 91, 'mxfp8': 120, 'nvfp4': 18},
        'kernels': {'fused': 292},
        'framework': {'fsdp': 17, 'megatron-lm': 18, 'nemo': 257},
    },
}
