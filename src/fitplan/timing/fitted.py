"""The end-to-end fit, as bench/fidelity.py --write printed it: the constants (fitplan.timing.calibration)
and the cross-validated residuals the error band is built from (fitplan.timing.uncertainty).
Generated; tests/unit/test_calibration.py checks it equals a fresh fit on bench/calibration/."""


VALUES = {
    'clock_ampere': 0.9436,
    'clock_hopper': 0.8616,
    'clock_blackwell': 0.7976,
    'clock_blackwell_ultra': 0.9136,
    'attention_scale': 0.6994,
    'elementwise_scale': 1.861,
    'moe_traffic': 2.624,
    'sm_sharing': 0.1195,
    'layer_overhead': 0.0003,
    'moe_sync_overhead': 0.0003594,
    'collective_overhead': 1.048e-05,
    'comm_efficiency': 0.9146,
    'a2a_efficiency': 0.8004,
    'straggler_cv': 0.0133,
}

BAND = {
    "runs": 354,
    "classes": {
        'dense': {"runs": 155, "alpha": 0.1, "q_low": -0.0785, "q_high": 0.1044},
        'moe_or_hybrid': {"runs": 199, "alpha": 0.1, "q_low": -0.1701, "q_high": 0.2727},
    },
    "support": {
        'architecture': {'ampere': 18, 'blackwell': 132, 'blackwell-ultra': 119, 'hopper': 85},
        'precision': {'bf16': 66, 'fp8': 101, 'mxfp8': 154, 'nvfp4': 33},
        'kernels': {'fused': 354},
        'power limit': {'the TDP': 354},
        'framework': {'fsdp': 20, 'megatron-lm': 18, 'nemo': 316},
    },
    "cells": {
        'dense/ampere': {"runs": 18, "alpha": 0.1, "q_low": -0.0785, "q_high": 0.1044, "holds": 1.0},
        'dense/blackwell': {"runs": 49, "alpha": 0.1, "q_low": -0.0785, "q_high": 0.1044, "holds": 0.878},
        'dense/blackwell-ultra': {"runs": 35, "alpha": 0.1, "q_low": -0.0785, "q_high": 0.1044, "holds": 0.857},
        'dense/hopper': {"runs": 53, "alpha": 0.07, "q_low": -0.0839, "q_high": 0.1237, "holds": 0.811},
        'moe_or_hybrid/blackwell': {"runs": 83, "alpha": 0.1, "q_low": -0.1701, "q_high": 0.2727, "holds": 0.843},
        'moe_or_hybrid/blackwell-ultra': {"runs": 84, "alpha": 0.1, "q_low": -0.1701, "q_high": 0.2727, "holds": 0.821},
        'moe_or_hybrid/hopper': {"runs": 32, "alpha": 0.1, "q_low": -0.1701, "q_high": 0.2727, "holds": 0.844},
    },
}
