"""What a framework adds around the components: compute slowed by the communication it hides, host time
per layer pass, and the wait for the slowest GPU.

Each is one end-to-end constant of fitplan.timing.calibration times a quantity the model already has:
  overlap slowdown   sigma * (communication hidden behind compute)      collectives take SMs and HBM
                                                                        bandwidth from the GEMMs they overlap
  host overhead      m * (max(0, L*omega - T_pass) per pass              launches per layer pass the GPU waits
                       + forwards * L_moe * E_local * sigma_moe)        for; a dropless MoE layer's host sync,
                                                                        then its local experts' GEMMs launched
  stragglers         cv * sqrt(2 ln N) * (the rest of the step)         the expected maximum of N GPUs'
                                                                        times, each cv above or below the mean
"""
import math

from fitplan.arith import is_array, maximum
from fitplan.explain import COUNT, SECONDS, formula
from fitplan.sources import Cite
from fitplan.specs.parallel import Recompute

CAL = Cite("fitplan", "docs/calibration.md (the constant fitted end to end)")


@formula("time/overlap_slowdown", "sigma*sum over tp, ep, cp, dp of (busy - exposed)", CAL, SECONDS,
         ("communication hidden behind compute still takes SMs and HBM bandwidth from it: sigma seconds of compute "
          "per second of hidden traffic (DeepSeek-V3 gives 20 of 132 SMs to communication, Sec. 3.2.2)",))
def overlap_slowdown_s(*, sigma, hidden):
    return sigma * maximum(hidden, 0)


def _host_text(**_):
    return ("m*(max(0, L*omega - T_f) + max(0, k_b*L*omega - T_b) + k_b*L_moe*E_local*sigma_moe), k_b = 2 with full "
            "recompute else 1")


# Where a dropless MoE layer reads its token counts on the host, in Megatron-Core
# (NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py@d98e8a64): the all-to-all dispatcher's
# preprocess marks a stream synchronisation before the expert-parallel all-to-all (its split sizes must be host
# integers) or before returning (tokens_per_expert); HybridEP's dispatch without a static budget
# (moe_expert_rank_capacity_factor unset: num_permuted_tokens None) "sizes buffers dynamically (CPU sync in
# dispatch)"; and the experts' grouped GEMM takes its splits as a host list (moe/experts.py@d98e8a64:
# tokens_per_expert.tolist(), Transformer Engine's GroupedLinear m_splits: List[int],
# transformer_engine/pytorch/module/grouped_linear.py@3ea13561, one GEMM, weight cast and quantisation per
# local expert). Only the forward reads them: the backward reuses the saved host splits (ctx.m_splits). After the
# read the stream has drained and the host launches the local experts' GEMMs one by one while the GPU waits, so
# the time lost grows with the experts a rank holds, num_experts/ep. Drop-and-pad (a capacity factor with
# moe_pad_expert_input_to_capacity, what fitplan's --capacity-factor exports) knows every count on the host
# (torch.full of the capacity): no read. CUDA graphs of the whole iteration capture a sync-free layer: none. One
# grouped-GEMM kernel over all the local experts (torchtitan's torch._grouped_mm over device offsets,
# torchtitan/models/moe/moe.py@003edbe52d; NeMo AutoModel's grouped_gemm ops.gmm) launches nothing per expert: none.
@formula("time/host_overhead", _host_text, CAL, SECONDS,
         ("the host launches each layer pass's kernels in omega; the GPU waits only where its own work is shorter "
          "(the CPU runs ahead otherwise): forward and backward each take at least L*omega",
          "a dropless MoE layer's forward (and its recompute) reads its token counts on the host: the queue drains, "
          "then the host launches its E_local local experts' GEMMs while the GPU waits, sigma_moe per local expert; "
          "L_moe = 0 under drop-and-pad (a capacity factor); sigma_moe = 0 where one grouped-GEMM kernel runs all "
          "the local experts (--expert-gemm grouped: torch._grouped_mm, grouped_gemm's gmm)",
          "CUDA graphs launch a whole iteration at once: no host time"))
def host_overhead_s(*, m, T_f, T_b, L, L_moe, E_local, omega, sigma_moe, recompute=None):
    k_b = 2 if recompute == Recompute.FULL else 1
    return m * (maximum(0 * T_f, L * omega - T_f) + maximum(0 * T_b, k_b * L * omega - T_b)
                + k_b * L_moe * E_local * sigma_moe)


def _sqrt_2ln(N):
    if is_array(N):
        import numpy as np
        return np.sqrt(2 * np.log(np.maximum(N, 1)))
    return math.sqrt(2 * math.log(max(N, 1)))


@formula("time/straggler_factor", "sqrt(2*ln N)", Cite("fitplan", "docs/calibration.md#stragglers (the expected "
                                                                  "maximum of N normal variates, Gumbel's limit)"),
         COUNT, ("N: the GPUs that synchronise every step",))
def straggler_factor(*, N):
    return _sqrt_2ln(N)


@formula("time/straggler", "cv*sqrt(2*ln N)*T_rest", CAL, SECONDS,
         ("the step waits for the slowest of N GPUs, each running cv above or below the mean",))
def straggler_s(*, cv, factor, T_rest):
    return cv * factor * T_rest
