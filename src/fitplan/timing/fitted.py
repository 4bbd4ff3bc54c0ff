"""The end-to-end fit, as bench/fidelity.py --write printed it: the constants (fitplan.timing.calibration)
and the cross-validated residuals the error band is built from (fitplan.timing.uncertainty).
Generated; tests/unit/test_calibration.py checks it equals a fresh fit on bench/calibration/."""


VALUES = {
    'clock_ampere': 0.942,
    'clock_hopper': 0.8595,
    'clock_blackwell': 0.7969,
    'clock_blackwell_ultra': 0.9161,
    'attention_scale': 0.702,
    'elementwise_scale': 1.815,
    'moe_traffic': 2.57,
    'sm_sharing': 0.1215,
    'layer_overhead': 0.0003,
    'moe_sync_overhead': 0.0003477,
    'collective_overhead': 1.049e-05,
    'comm_efficiency': 0.9118,
    'a2a_efficiency': 0.7984,
    'straggler_cv': 0.01326,
}

BAND = {
    "runs": 354,
    "classes": {
        'dense': {"runs": 155, "alpha": 0.1, "q_low": -0.0767, "q_high": 0.1061},
        'moe_or_hybrid': {"runs": 199, "alpha": 0.1, "q_low": -0.1829, "q_high": 0.2732},
    },
    "support": {
        'architecture': {'ampere': 18, 'blackwell': 132, 'blackwell-ultra': 119, 'hopper': 85},
        'precision': {'bf16': 66, 'fp8': 101, 'mxfp8': 154, 'nvfp4': 33},
        'kernels': {'fused': 354},
        'power limit': {'the TDP': 354},
        'framework': {'fsdp': 20, 'megatron-lm': 18, 'nemo': 316},
    },
}
