"""Serving's storage formats: the weight and KV-cache precisions `fitplan infer` takes, and the
servers --server names (data only, so that the command line's choices are known without loading
the serving model, fitplan.serving, or the servers' rules, fitplan.servers)."""
from fitplan.record import record


@record(slots=True)
class WeightFormat:
    """How a weight precision stores parameters: bits per weight, and per group of `group`
    weights `group_bits` of scale and zero point (group 1, 0 bits: no per-group data)."""
    bits: int
    group: int = 1
    group_bits: int = 0
    note: str = ""


# int4: AWQ's grouped weight-only format, groups of 128 along the input dimension, each with an
# fp16 scale (16 bits) and a 4-bit zero point (AutoAWQ's GEMM layout, the one vLLM loads).
# fp8 and int8 keep a scale per tensor, per output channel or per 128x128 block (DeepSeek-V3's
# fp32 block scales add 4/16384 B per weight): under 0.1% of the weights, not counted.
INT4_GROUP, INT4_GROUP_BITS = 128, 16 + 4
WEIGHT_FORMATS = {
    "bf16": WeightFormat(16),
    "fp8": WeightFormat(8, note="per-tensor or block scales not counted (< 0.1%)"),
    "int8": WeightFormat(8, note="per-channel scales not counted (< 0.1%)"),
    "int4": WeightFormat(4, INT4_GROUP, INT4_GROUP_BITS,
                         note=f"groups of {INT4_GROUP}, an fp16 scale and a 4-bit zero point each (AWQ)"),
}
KV_BYTES = {"bf16": 2, "fp8": 1, "int8": 1}   # bytes per cached element; a per-tensor scale not counted
WEIGHT_PRECISIONS, KV_PRECISIONS = tuple(WEIGHT_FORMATS), tuple(KV_BYTES)

SERVERS = ("vllm", "sglang")   # --server: whose start-up rule sizes the KV cache (fitplan.servers)
