"""Precision recipes: bytes per parameter of each model-state component."""
from fitplan.specs.training import Recipe

# Optimizer moments, (name, bytes per parameter); the exporters recognise an optimizer by these.
ADAM = (("adam_m", 4), ("adam_v", 4))
SGD_MOMENTUM = (("momentum", 4),)

RECIPES = {r.name: r for r in (
    Recipe(name="mixed-adam", weights_bytes=2, grads_bytes=2, master_bytes=4, moments=ADAM,
           description="bf16/fp16 weights and grads, fp32 master weights, fp32 Adam moments (16 B/param)",
           source="ZeRO Sec. 3.1 (K = 12)"),
    Recipe(name="bf16-adam", weights_bytes=2, grads_bytes=2, master_bytes=0, moments=ADAM,
           description="bf16 weights updated in place, no fp32 master copy, fp32 Adam moments (12 B/param)",
           source="Transformer Math 101 (optimizer state without the fp32 copy)"),
    Recipe(name="fp32-adam", weights_bytes=4, grads_bytes=4, master_bytes=0, moments=ADAM,
           description="fp32 weights and grads, fp32 Adam moments (16 B/param)",
           source="HF Ultra-Scale Playbook, 'Memory usage in Transformers'"),
    Recipe(name="megatron-fp32-grad", weights_bytes=2, grads_bytes=4, master_bytes=4, moments=ADAM,
           description="bf16 weights, fp32 main grads, fp32 master weights, fp32 Adam (18 B/param)",
           source="Megatron-LM theoretical_memory_usage.py (18 B/param without the distributed optimizer)"),
    Recipe(name="adam-8bit", weights_bytes=2, grads_bytes=2, master_bytes=4, moments=(("adam_m", 1), ("adam_v", 1)),
           description="mixed precision with 8-bit Adam moments (10 B/param)",
           source="Dettmers et al. 2022; Transformer Math 101 (8-bit AdamW: 6 B/param of optimizer state)"),
    Recipe(name="bnb-adamw-8bit", weights_bytes=2, grads_bytes=2, master_bytes=0,
           moments=(("adam_m", 1 + 4 / 256), ("adam_v", 1 + 4 / 256)),
           description="bf16 weights updated in place, bitsandbytes 8-bit AdamW: uint8 moments with an fp32 "
                       "absmax per 256-element block (6.03 B/param); --paged-optimizer for PagedAdamW8bit",
           source="bitsandbytes-foundation/bitsandbytes bitsandbytes/optim/optimizer.py@95f9af309d "
                  "Optimizer2State.init_state (blocksize 256; tensors under 4,096 elements keep fp32 moments)"),
    Recipe(name="sgd-momentum", weights_bytes=2, grads_bytes=2, master_bytes=4, moments=SGD_MOMENTUM,
           description="mixed precision SGD with fp32 momentum (12 B/param)",
           source="Transformer Math 101 (SGD with momentum: 8 B/param of optimizer state)"),
    Recipe(name="exercise-10", weights_bytes=2, grads_bytes=0, master_bytes=0, moments=ADAM,
           description="the exercise's simplified budget: bf16 weights + 8 B of Adam moments, no gradients or "
                       "master copy (10 B/param)",
           source="the seed exercise (a baseline, not a trainable recipe)"),
    Recipe(name="deepseek-v3-fp8", weights_bytes=2, grads_bytes=4, master_bytes=4,
           moments=(("adam_m", 2), ("adam_v", 2)), compute="fp8",
           description="DeepSeek-V3's: bf16 weights cast to fp8 for the GEMMs, fp32 grads, fp32 master, bf16 Adam "
                       "moments (14 B/param)",
           source="DeepSeek-V3 report Sec. 3.3.3 (bf16 moments; fp32 master weights and gradients)"),
    Recipe(name="fp8", weights_bytes=1, grads_bytes=4, master_bytes=4, moments=ADAM, compute="fp8",
           description="fp8 primary weights (Megatron --fp8-param-gather), fp32 main grads, fp32 master, "
                       "fp32 Adam (17 B/param); activations stay at the training act_bytes",
           source="Micikevicius et al. 2022; Megatron-LM/Transformer Engine fp8 primary weights"),
)}
DEFAULT_RECIPE = "mixed-adam"
