"""Activation bytes stored for the backward pass, per GPU.

Symbols, as in [korthikanti] Table 1: s sequence length, b micro-batch size, h hidden
size, a attention heads, t tensor-parallel degree, L layers, p pipeline degree, v
vocabulary (here V). Generalised: q = a*d query width, kv = g*d key/value width, f ffn
size, n = 2 (GeLU) or 3 (fused SwiGLU) stored ffn-wide tensors, e bytes per activation
element, M bytes per dropout-mask element, D = 1 with dropout and 0 without, c context-
parallel degree. The derivation is in docs/formulas.md; per layer and micro-batch:

  R = s*b*h*(4e + 2*D*M)      two LN inputs, two LN outputs, two dropout masks;
                              replicated over tp unless sequence parallel splits them
  T = s*b*(e*(2q + 2kv) + n*e*f)
                              Q, K, V, attention-output-projection input, the MLP's
                              ffn-wide tensors; split by tp
  S = a*s^2*b*(e + D*(e + M)) softmax output, its dropout mask and output; split by tp

With e = 2, M = 1, D = 1, q = kv = h, f = 4h, n = 2 this is Korthikanti et al.'s
R = 10sbh, T = 24sbh, S = 5as^2b, and:
  none       (R*[t if no SP else 1] + T + S) / (t*c)   Table 2 rows 2-3: sbh(10 + 24/t + 5as/(ht)), sbh/t(34 + 5as/h)
  selective  (R*[t if no SP else 1] + T) / (t*c)       Table 2 rows 4-5: sbh(10 + 24/t), 34sbh/t
  full       e*s*b*h / ([t if SP else 1]*c)            Table 2 row 6: 2sbh (the layer input; under SP it is the
                                                        sequence-sharded input, 2sbh/t)
Context parallel splits the sequence, so every term divides by c (for the score term,
a*(s/c)*s*b: local queries against all keys).
"""
from fitplan.arith import ceil_div, minimum, select
from fitplan.explain import COUNT, formula
from fitplan.sources import Cite
from fitplan.specs.parallel import Recompute

TABLE2 = Cite("korthikanti", "Table 2 (Sec. 4), generalised in formulas.md#activations")
SEC43 = Cite("korthikanti", "Sec. 4.3")


def _paper_shaped(*, h, q, kv, f, n, e, M, D, **_) -> bool:
    """GPT shapes with Korthikanti et al.'s assumptions: the formula reduces to Table 2."""
    return (q, kv, f, n, e, M, D) == (h, h, 4 * h, 2, 2, 1, 1)


def _layer_text(*, recompute, sp, t, c, **kw):
    div_c = "" if c == 1 else "/c"
    if _paper_shaped(**kw):
        if recompute == Recompute.FULL:
            return ("2*s*b*h/t" if sp and t > 1 else "2*s*b*h") + div_c
        if t == 1:
            return ("34*s*b*h" if recompute == Recompute.SELECTIVE else "s*b*h*(34 + 5as/h)") + div_c
        if sp:
            return ("34*s*b*h/t" if recompute == Recompute.SELECTIVE else "s*b*h/t*(34 + 5as/h)") + div_c
        return ("s*b*h*(10 + 24/t)" if recompute == Recompute.SELECTIVE else "s*b*h*(10 + 24/t + 5as/(h*t))") + div_c
    rep = "R" if sp else "R*t"
    if recompute == Recompute.FULL:
        return "e*s*b*h/(t*c)" if sp else "e*s*b*h/c"
    core = "" if recompute == Recompute.SELECTIVE else " + S"
    return f"({rep} + T{core})/(t*c), R=s*b*h*(4e+2DM), T=s*b*(e*(2q+2kv)+n*e*f), S=a*s^2*b*(e+D*(e+M))"


@formula("activations/per_layer", _layer_text, TABLE2,
         assumes=("activations stored at e bytes/element; dropout masks at M bytes/element (Korthikanti Sec. 4)",
                  "no flash attention: the s^2 attention scores are stored unless recomputed",
                  "LayerNorm mean/rstd (2sb elements) ignored, as in Korthikanti Sec. 4"))
def per_layer_bytes(*, s, b, h, a, q, kv, f, n, e, M, D, t, c, sp, recompute):
    """Bytes one layer stores for one micro-batch on one GPU."""
    if recompute == Recompute.FULL:
        return ceil_div(e * s * b * h, select(sp, t, 1) * c)
    R = s * b * h * (4 * e + 2 * D * M)
    T = s * b * (e * (2 * q + 2 * kv) + n * e * f)
    S = 0 if recompute == Recompute.SELECTIVE else a * s * s * b * (e + D * (e + M))
    return ceil_div(R * select(sp, 1, t) + T + S, t * c)


@formula("activations/recompute_workspace",
         lambda *, recompute, **_: {"none": "0", "selective": "S/(t*c)  (one layer's attention core)",
                                    "full": "(R*[t] + T + S)/(t*c)  (one layer, no recompute)"}[str(recompute)],
         Cite("fitplan", "formulas.md#recompute-workspace"))
def recompute_workspace_bytes(*, s, b, h, a, q, kv, f, n, e, M, D, t, c, sp, recompute):
    """While one layer's backward runs, its recomputed activations exist on top of the
    stored ones: the whole layer under full recompute, the attention core under selective.
    Korthikanti et al. leave this transient out; fitplan counts it."""
    if recompute == Recompute.NONE:
        return 0 * b
    if recompute == Recompute.FULL:
        return per_layer_bytes(s=s, b=b, h=h, a=a, q=q, kv=kv, f=f, n=n, e=e, M=M, D=D, t=t, c=c, sp=sp,
                               recompute=Recompute.NONE)
    return ceil_div(a * s * s * b * (e + D * (e + M)), t * c)


@formula("activations/chunks_in_flight",
         "min(m, p - r) for v = 1; min(m*v, 2(p - r - 1) + (v - 1)p + 1) for v > 1",
         Cite("megatron-schedules", "forward_backward_pipelining_*: warmup micro-batches + 1"), COUNT)
def chunks_in_flight(*, p, v, r, m):
    """Model chunks (each L/(p*v) layers) whose activations pipeline rank r holds at its
    peak under 1F1B: the warm-up forwards plus the first steady-state one. For r = 0 and
    m >= p this is L layers' worth for v = 1 [korthikanti Sec. 4.2.3] and
    L*(1 + (p - 1)/(p*v)) for interleaved 1F1B [korthikanti Sec. 4.2.3, interleave factor]."""
    one = minimum(m, p - r)
    interleaved = minimum(m * v, 2 * (p - r - 1) + (v - 1) * p + 1)
    return select(v == 1, one, interleaved)


@formula("activations/embedding",
         lambda *, sp, **_: "n_mb*(D*M*s*b*h/" + ("t" if sp else "1") + " + 8*s*b)/c",
         Cite("korthikanti", "Sec. 4.3; token ids: Megatron-LM theoretical_memory_usage.py"))
def embedding_bytes(*, s, b, h, M, D, t, c, sp, n_mb):
    """First stage: the embedding-dropout mask (sbhp/t in Sec. 4.3, with SP) and the int64
    token ids (8sb, Megatron-LM), for each of the n_mb micro-batches in flight."""
    return n_mb * (ceil_div(D * M * s * b * h, select(sp, t, 1) * c) + ceil_div(8 * s * b, c))


@formula("activations/embedding_microbatches",
         "min(m, p) for v = 1; min(m, ceil(p*(1 + (p - 1)/(p*v)))) for v > 1",
         Cite("megatron", "in_flight_microbatches"), COUNT)
def embedding_microbatches(*, p, v, m):
    return minimum(m, select(v == 1, p, ceil_div(p * v + p - 1, v)))


@formula("activations/output",
         lambda *, sp, **_: ("2*e*s*b*h/(t*c)" if sp else "2*e*s*b*h/c") + " + 4*s*b*V/(t*c)", SEC43,
         assumes=("logits kept in fp32 for the cross-entropy (Korthikanti Sec. 4.3)",))
def output_bytes(*, s, b, h, V, e, t, c, sp):
    """Last stage: final-norm input and output-projection input (2sbh/t each in Sec. 4.3)
    and the fp32 logits of the vocabulary-parallel cross-entropy, 4sbV/t."""
    return ceil_div(2 * e * s * b * h, select(sp, t, 1) * c) + ceil_div(4 * s * b * V, t * c)
