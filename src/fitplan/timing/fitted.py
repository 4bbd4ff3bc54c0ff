"""The end-to-end fit, as bench/fidelity.py --write printed it: the constants (fitplan.timing.calibration)
and the cross-validated residuals the error band is built from (fitplan.timing.uncertainty).
Generated; tests/unit/test_calibration.py checks it equals a fresh fit on bench/calibration/."""


VALUES = {
    'clock_ampere': 0.9798,
    'clock_hopper': 0.8763,
    'clock_blackwell': 1.0,
    'attention_scale': 0.8796,
    'elementwise_scale': 1.021,
    'sm_sharing': 0.1058,
    'layer_overhead': 2.005e-05,
    'collective_overhead': 1.001e-05,
    'comm_efficiency': 0.917,
    'a2a_efficiency': 0.7343,
    'straggler_cv': 0.01047,
}

BAND = {
    "runs": 37, "q_low": -0.054, "q_high": 0.5119,
    "support": {
        'architecture': {'ampere': 18, 'hopper': 19},
        'precision': {'bf16': 20, 'fp8': 17},
        'kernels': {'fused': 37},
    },
}
