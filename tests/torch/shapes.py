"""A third reference shape for the torch cross-checks (TINY_GPT and TINY_LLAMA are in fitplan.validate)."""
from fitplan.specs.model import Mlp, ModelSpec, Norm, Position

# MQA with an explicit head size (q = a*d = 128 != h = 96), LayerNorm, biases, SwiGLU, untied.
TINY_MIX = ModelSpec(name="tiny-mix", num_layers=1, hidden_size=96, num_heads=4, num_kv_heads=1, head_dim=32,
                     ffn_hidden_size=192, vocab_size=256, max_seq_len=64, mlp=Mlp.SWIGLU, norm=Norm.LAYERNORM,
                     position=Position.LEARNED, tied_embeddings=False, linear_bias=True)

# Nemotron-4's layout at toy size: squared-ReLU MLP (two matrices), LayerNorm, RoPE, GQA 4/2, no linear
# biases, untied embeddings.
TINY_RELU2 = ModelSpec(name="tiny-relu2", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                       ffn_hidden_size=256, vocab_size=256, max_seq_len=64, mlp=Mlp.RELU2, norm=Norm.LAYERNORM,
                       position=Position.ROPE, tied_embeddings=False, linear_bias=False)
