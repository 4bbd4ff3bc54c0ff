"""The end-to-end fit, as bench/fidelity.py --write printed it: the constants (fitplan.timing.calibration)
and the cross-validated residuals the error band is built from (fitplan.timing.uncertainty).
Generated; tests/unit/test_calibration.py checks it equals a fresh fit on bench/calibration/."""


VALUES = {
    'clock_ampere': 0.9474,
    'clock_hopper': 0.8672,
    'clock_blackwell': 0.9184,
    'clock_blackwell_ultra': 1.025,
    'attention_scale': 0.7689,
    'elementwise_scale': 2.04,
    'moe_traffic': 2.53,
    'sm_sharing': 0.1187,
    'layer_overhead': 0.0003,
    'moe_sync_overhead': 0.002087,
    'collective_overhead': 1.035e-05,
    'comm_efficiency': 0.929,
    'a2a_efficiency': 0.8727,
    'straggler_cv': 0.01127,
}

BAND = {
    "runs": 354, "alpha": 0.06, "q_low": -0.3177, "q_high": 0.416,
    "support": {
        'architecture': {'ampere': 18, 'blackwell': 132, 'blackwell-ultra': 119, 'hopper': 85},
        'precision': {'bf16': 66, 'fp8': 101, 'mxfp8': 154, 'nvfp4': 33},
        'kernels': {'fused': 354},
        'framework': {'fsdp': 20, 'megatron-lm': 18, 'nemo': 316},
    },
}
