"""The end-to-end fit, as bench/fidelity.py --write printed it: the constants (fitplan.timing.calibration)
and the cross-validated residuals the error band is built from (fitplan.timing.uncertainty).
Generated; tests/unit/test_calibration.py checks it equals a fresh fit on bench/calibration/."""






VALUES = {
    'clock_ampere': 0.9699,
    'clock_hopper': 0.8861,
    'clock_blackwell': 0.9331,
    'clock_blackwell_ultra': 1.043,
    'attention_scale': 0.6668,
    'elementwise_scale': 1.318,
    'moe_traffic': 2.814,
    'sm_sharing': 0.1295,
    'layer_overhead': 0.0003,
    'moe_sync_overhead': 0.001379,
    'collective_overhead': 1.011e-05,
    'comm_efficiency': 0.9156,
    'a2a_efficiency': 0.7974,
    'straggler_cv': 0.01035,
}

BAND = {
    "runs": 292, "alpha": 0.07, "q_low": -0.2438, "q_high": 0.4063,
    "support": {
        'architecture': {'ampere': 18, 'blackwell': 109, 'blackwell-ultra': 91, 'hopper': 74},
        'precision': {'bf16': 63, 'fp8': 91, 'mxfp8': 120, 'nvfp4': 18},
        'kernels': {'fused': 292},
    },
}
