"""Compute on one GPU: a micro-batch's forward and backward passes, one layer's, the optimizer step.

Each class of GEMM runs at its sustained efficiency (fitplan.timing.layer_rates), and each
layer adds its memory-bound kernels; the backward moves BACKWARD_TRAFFIC times the forward's
bytes, and a recompute reruns the forward's for what it did not store.
"""

from fitplan.arith import maximum, select
from fitplan.counts import flops as F
from fitplan.counts import params as P
from fitplan.explain import RAW, SECONDS, formula
from fitplan.memory.breakdown import Setup, Shapes, stage_expert_psi, stage_psi
from fitplan.memory.stages import end_stages
from fitplan.record import record
from fitplan.sources import Cite
from fitplan.timing import compute as C
from fitplan.timing import elementwise as E
from fitplan.timing import pipeline as PL
from fitplan.timing.layer_rates import LayerRates

def _pass_text(*, F_ssm=0, **_):
    ssm = " + F_ssm/(peak*eff_ssm)" if not isinstance(F_ssm, int) or F_ssm else ""
    return f"(F_lin/(peak_lin*eff_lin) + F_core/(peak*eff_core){ssm} + F_head/(peak*eff_head))/(t*c) + l*T_mem + T_loss"


@formula("time/pass", _pass_text, Cite("fitplan", "formulas.md#compute-time"), SECONDS,
         ("the layers' linear GEMMs (fp8 under an fp8 recipe), the attention core and the output layer each at "
          "their sustained efficiency (fitplan.timing.gemm); T_mem: a layer's memory-bound kernels and fp8 casts; "
          "T_loss: the loss's (on the stage with the output layer)",))
def pass_s(*, F_lin, F_core, F_head, peak_lin, peak, eff_lin, eff_core, eff_head, t, c, l, T_mem, F_ssm=0,
           eff_ssm=1, T_loss=0):
    """One micro-batch's pass (forward, or backward with its recompute) through l layers on one GPU.
    F_ssm: a hybrid model's Mamba-2 scans, bf16 batched GEMMs at their own efficiency."""
    return (F_lin / (peak_lin * eff_lin) + F_core / (peak * eff_core) + F_ssm / (peak * eff_ssm)
            + F_head / (peak * eff_head)) / (t * c) + l * T_mem + T_loss


@record(slots=True)
class LayerTimes:
    """One layer's compute for one micro-batch on the paced stage (the stage's average layer):
    forward, backward without recompute, the recompute, and the linear GEMMs of its attention
    and MLP blocks (the windows tensor-parallel overlap hides behind)."""
    forward: object
    backward: object
    recompute: object
    attn_linear: object
    mlp_linear: object


@formula("time/layer", "F/(t*c*peak*eff)", Cite("fitplan", "formulas.md#per-layer"), SECONDS,
         ("one layer of the stage, one micro-batch, at the pass's rate",))
def layer_s(*, F, t, c, peak, eff):
    return F / (t * c * peak * eff)


def compute_passes(ev, c, *, m, flops, L, rates: LayerRates, loss=(0, 0)):
    """One micro-batch's forward and backward through the busiest stage, split over tp and
    cp, and all m of them: each class of GEMM at its sustained efficiency, plus the layers'
    memory-bound kernels (the backward moves twice the forward's bytes, and a recompute
    reruns the forward's for what it did not store). loss: the loss kernels' (forward, backward) seconds."""
    lin, core, head = flops["linear"], L * flops["core"], flops["logits"]
    kw = dict(peak_lin=rates.peak_linear, peak=rates.peak, eff_lin=rates.linear, eff_core=rates.core,
              eff_head=rates.head, t=c.tp, c=c.cp, l=L)
    ssm_f, ssm_b = {}, {}
    if "ssm" in flops:   # a hybrid model's Mamba-2 scans
        ssm_f = dict(F_ssm=L * flops["ssm"], eff_ssm=rates.ssm)
        ssm_b = dict(F_ssm=2 * L * flops["ssm"] + flops["rerun_ssm"], eff_ssm=rates.ssm)
    T_f = ev(pass_s, key="time/forward_microbatch", F_lin=lin, F_core=core, F_head=head,
             T_mem=rates.mem_s + rates.cast_forward_s, T_loss=loss[0], **kw, **ssm_f)
    # frozen matrices (adapters' fine-tuning) compute only their input's gradient in the backward
    T_b = ev(pass_s, key="time/backward_microbatch", F_lin=2 * lin + flops["rerun_linear"] - flops.get("frozen_linear", 0),
             F_core=2 * core + flops["rerun_core"], F_head=2 * head - flops.get("frozen_head", 0),
             T_mem=E.BACKWARD_TRAFFIC * rates.mem_s + rates.rerun_mem_s + rates.cast_backward_s, T_loss=loss[1],
             **kw, **ssm_b)
    return T_f, T_b, ev(PL.microbatches_s, key="time/compute", m=m, T_f=T_f, T_b=T_b)


@formula("time/layer_pass", "T_linear + T_core + k*T_mem", Cite("fitplan", "formulas.md#per-layer"), SECONDS,
         ("a pass of one layer: its linear GEMMs and attention core at their sustained rates, and its "
          "memory-bound kernels (k: the backward moves BACKWARD_TRAFFIC times the forward's bytes)",))
def layer_pass_s(*, T_linear, T_core, T_mem, k=1):
    return T_linear + T_core + k * T_mem


def layer_times(ev, setup: Setup, c, *, L, flops, rates, kinds=None) -> LayerTimes:
    """The stage's average layer, one micro-batch, at the GEMM classes' sustained rates
    (fitplan.timing.gemm): forward (linears, attention core, memory-bound kernels), backward
    (twice the GEMMs, the backward's traffic), the recompute's share, and the attention and
    MLP blocks' linear GEMMs. A hybrid stage (kinds): the average layer's, its Mamba-2 scans in
    the core's place beside the attention core, and for the tensor-parallel windows a pair of
    layers: the mixers' (Mamba, attention) average and the feed-forward layers' (MLP, MoE)."""
    model, sh = setup.model, Shapes.of(setup)
    lin_at = lambda key, F: ev(layer_s, key=key, F=F, t=c.tp, c=c.cp, peak=rates.peak_linear, eff=rates.linear)
    core_at = lambda key, F: ev(layer_s, key=key, F=F, t=c.tp, c=c.cp, peak=rates.peak, eff=rates.core)
    n = maximum(L, 1)
    lin = lin_at("time/layer/forward_linear", flops["linear"] / n)
    core = core_at("time/layer/forward_core", flops["core"])
    rerun_core = core_at("time/layer/recompute_core", flops["rerun_core"] / n)
    if "ssm" in flops:
        ssm_at = lambda key, F: ev(layer_s, key=key, F=F, t=c.tp, c=c.cp, peak=rates.peak, eff=rates.ssm)
        core = core + ssm_at("time/layer/forward_ssd_scan", flops["ssm"])
        rerun_core = rerun_core + ssm_at("time/layer/recompute_ssd_scan", flops["rerun_ssm"] / n)
    if kinds is not None:
        attn, mlp = _hybrid_pair_flops(ev, setup, c, kinds=kinds)
    else:
        attn = ev(F.matmul_flops, key="flops/layer/attention_linear", B=c.micro_batch, s=sh.s,
                  P=P.attention_matmul_params(model))
        mlp = flops["linear"] / n - attn
    rerun = ev(layer_pass_s, key="time/layer/recompute",
               T_linear=lin_at("time/layer/recompute_linear", flops["rerun_linear"] / n),
               T_core=rerun_core, T_mem=rates.rerun_mem_s)
    return LayerTimes(forward=ev(layer_pass_s, key="time/layer/forward", T_linear=lin, T_core=core, T_mem=rates.mem_s),
                      backward=ev(layer_pass_s, key="time/layer/backward", T_linear=lin_at(
                          "time/layer/backward_linear", (2 * flops["linear"] - flops.get("frozen_linear", 0)) / n),
                                  T_core=2 * core, T_mem=rates.mem_s, k=E.BACKWARD_TRAFFIC),
                      recompute=rerun, attn_linear=lin_at("time/layer/attention_linear", attn),
                      mlp_linear=lin_at("time/layer/mlp_linear", mlp))


def _hybrid_pair_flops(ev, setup: Setup, c, *, kinds):
    """A hybrid stage's (mixer, feed-forward) layers' average linear FLOPs: the Mamba and
    attention layers' weighted by their counts, and the MLP and MoE layers'."""
    from fitplan.counts import hybrid as HY
    from fitplan.timing.elementwise import mix_kinds
    model, sh = setup.model, Shapes.of(setup)
    used = set(model.layer_pattern) | set(model.mtp_pattern or "")
    out = []
    for group, key in (("M*", "flops/layer/mixer_linear"), ("-E", "flops/layer/feed_forward_linear")):
        ks = [k for k in group if k in used]
        F_k = [F.matmul_flops.fn(B=c.micro_batch, s=sh.s, P=HY.block_matmul_params(model, k)) for k in ks]
        count = sum(kinds[k] for k in ks) if ks else 0
        out.append(mix_kinds([kinds[k] for k in ks], count, F_k) if ks else 0 * c.micro_batch)
    return out[0], out[1]


def optimizer_time(ev, setup: Setup, c, *, like):
    """The optimizer step of the GPU that updates the most parameters: the larger of the first
    and last stages, its 1/n shard under ZeRO (n: dp x cp, or the hybrid shard group), routed
    experts over their expert-data-parallel group. No HBM figure: left out (0)."""
    W = setup.cluster.gpu.hbm_bytes_per_s
    if W is None:
        return 0 * like
    model, recipe = setup.model, setup.training.recipe
    stages = end_stages(model, c)
    psi = maximum(*(stage_psi(RAW, model, c, stage=st) for st in stages))
    n = select(c.zero >= 1, c.shard_degree + 0 * c.dp if c.shard_degree is not None else c.dp * c.cp, 1)
    experts = {}
    if model.moe is not None:
        n_ed = maximum(c.tp * c.dp * c.cp // c.ep, 1)
        experts = dict(psi_e=maximum(*(stage_expert_psi(RAW, model, c, stage=st) for st in stages)),
                       n_e=select(c.zero >= 1, n_ed, 1))
    return ev(C.optimizer_step_s, psi=psi, g=recipe.grads_bytes, K=recipe.optimizer_bytes, w=recipe.weights_bytes,
              m_b=recipe.master_bytes, master=recipe.master_bytes > 0, n=n, W=W, **experts)
