"""What the memory model reads of a setup: the model, the cluster and the training spec together
(Setup), and the shapes every per-layer formula takes from them (Shapes, MoeShapes: hidden size,
heads, sequence, bytes per element, the experts' routing). Pure: no printing, files or torch."""
from dataclasses import field

from fitplan.counts import params as P
from fitplan.errors import SpecError
from fitplan.memory import finetune as FT
from fitplan.record import record
from fitplan.specs import ClusterSpec, ModelSpec, TrainingSpec
from fitplan.specs.model import Position

@record(slots=True)
class Setup:
    """The scalar half of a question: what is trained, how, and on which GPUs. `assumed` names
    each default the request took instead of a value the user gave (the reports print them);
    it does not change any answer, so equality ignores it."""
    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    assumed: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        m, t = self.model, self.training
        if m.position is Position.LEARNED and t.seq_len > m.max_seq_len:
            raise SpecError(f"training.seq_len {t.seq_len} is longer than the model's learned position table "
                            f"({m.max_seq_len}); use --seq-len <= {m.max_seq_len} or a RoPE model")
        problem = FT.check_supported(m, t)
        if problem:
            raise SpecError(problem)


@record(slots=True)
class MoeShapes:
    """The MoE-layer symbols of fitplan.memory.activations: top-k, rho (capacity factor, or
    the dropless load imbalance), expert and shared-expert widths, experts."""
    k: int
    rho: float
    f_e: int
    f_s: int
    E: int
    w: int | None = None   # LatentMoE: the routed experts' latent width l

    def kw(self) -> dict:
        """The keywords these symbols add to a formula call for an MoE layer."""
        return dict(k=self.k, rho=self.rho, f_e=self.f_e, f_s=self.f_s, E=self.E,
                    **({} if self.w is None else {"w": self.w}))


@record(slots=True)
class Shapes:
    """The per-layer activation symbols of fitplan.memory.activations, from the specs; moe
    is None for a dense model."""
    s: int
    h: int
    a: int
    q: int
    kv: int
    f: int
    n: int
    e: int
    M: int
    D: int
    r_extra: int = 0          # MLA: the latents and their norms' outputs, replicated over tp
    kernel: str = "eager"
    moe: MoeShapes | None = None
    e_l: int | None = None    # bytes of a stored linear input where it differs from e (fp8 recipes: 1)
    bias: str = "none"        # which linears have a bias (counts.params.bias_kind): op SAC cannot save an addmm

    @classmethod
    def of(cls, setup: Setup) -> "Shapes":
        """The setup's shapes; the last setup's kept (a plan asks for them a few hundred times: 7 us each)."""
        global _LAST
        last = _LAST   # one read: (setup, shapes), replaced whole
        if last[0] is setup:
            return last[1]
        out = cls._of(setup)
        _LAST = (setup, out)
        return out

    @classmethod
    def _of(cls, setup: Setup) -> "Shapes":
        m, tr = setup.model, setup.training
        moe = None if m.moe is None else MoeShapes(
            k=m.moe.experts_per_token,
            rho=m.moe.capacity_factor if m.moe.capacity_factor is not None else tr.moe_imbalance,
            f_e=m.moe.expert_ffn_size, f_s=m.moe.num_shared_experts * m.moe.expert_ffn_size, E=m.moe.num_experts,
            w=m.moe.latent_size)
        r_extra = 0 if m.mla is None else 2 * (m.mla.q_lora_rank + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
        return cls(s=tr.seq_len, h=m.hidden_size, a=m.num_heads, q=m.q_size, kv=m.kv_size, f=m.ffn_hidden_size,
                   n=3 if m.mlp.gated else 2, e=tr.act_bytes, M=1, D=1 if tr.dropout else 0,
                   r_extra=r_extra, kernel="eager" if tr.attention_kernel == "eager" else "flash", moe=moe,
                   e_l=1 if tr.recipe.compute != "bf16" and tr.act_bytes > 1 else None, bias=P.bias_kind(m))

    def kw(self, recompute=None) -> dict:
        """The keywords of a per-layer formula call (activations.per_layer_bytes and its kin);
        r_extra and kernel only where they differ from the formulas' defaults, bias only for op
        recompute (the one mode it changes) on a model with biases."""
        out = dict(s=self.s, h=self.h, a=self.a, q=self.q, kv=self.kv, f=self.f, n=self.n, e=self.e, M=self.M,
                   D=self.D)
        if self.r_extra:
            out["r_extra"] = self.r_extra
        if self.kernel != "eager":
            out["kernel"] = self.kernel
        if self.e_l is not None:
            out["e_l"] = self.e_l
        if self.bias != "none" and str(recompute) == "op":
            out["bias"] = self.bias
        return out


_LAST: tuple = (None, None)   # Shapes.of's last setup and its shapes
