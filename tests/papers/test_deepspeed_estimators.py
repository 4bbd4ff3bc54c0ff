"""DeepSpeed's own model-state estimators, reproduced: per GPU and per node's CPU memory, with and
without offload, for Llama 2 7B and 70B on one node of 8 GPUs.

The estimators, read in deepspeedai/DeepSpeed (deepspeed/runtime/zero/stage_1_and_2.py
`estimate_zero2_model_states_mem_needs`, called by `estimate_zero2_model_states_mem_needs_all_cold`;
deepspeed/runtime/zero/stage3.py `estimate_zero3_model_states_mem_needs`, called by
`estimate_zero3_model_states_mem_needs_all_cold`). P parameters, L the largest layer's parameters,
G GPUs per node, N GPUs in all, n nodes, buffer factor 1.5; they print bytes / 2^30 as "GB":

  ZeRO-2, offload_optimizer=cpu   GPU 2P                 CPU P*max(4N, 16)*1.5
  ZeRO-2, none                    GPU 2P + int(18P/N)    CPU 4P*G*1.5
  ZeRO-3, offload_param=cpu and offload_optimizer=cpu
                                  GPU 4L                 CPU 18P/n*1.5 (zero_init), P*max(4G, 18/n)*1.5 (not)
  ZeRO-3, offload_optimizer=cpu   GPU 4L + int(2P/N)     CPU 16P/n*1.5 (zero_init), P*max(4G, 16/n)*1.5 (not)
  ZeRO-3, none                    GPU 4L + int(18P/N)    CPU 4L*G*1.5 (zero_init), 4P*G*1.5 (not)

The 18 bytes are DeepSpeed's: 2 (16-bit weights) + 4 (fp32 weights) + 4 (fp32 gradients) + 8 (Adam's
moments) under ZeRO-3, and under ZeRO-2 2 (16-bit gradients) + 4 + 4 + 8 beside the unsharded 16-bit
weights. Offloaded, the CPU holds 16 of them (fp32 weights, fp32 gradients, moments), and 18 with the
16-bit weights too.

The same assumptions in fitplan: recipe megatron-fp32-grad (w = 2, g = 4, m = 4, K = 8: DeepSpeed's 18),
ZeRO sharding over the node's 8 GPUs, offload's host gradient at the master weights' precision (fp32),
host memory per node = per GPU x 8 processes. DeepSpeed's 4L (L: the largest layer's parameters) is its
budget for ZeRO-3's gathered layer; fitplan's own term for it is runtime/fsdp_buffers at a layer's backward,
(1 + k)*w*P_layer + g*P_layer (fitplan.memory.runtime.fsdp_buffers_bytes: the layer and k = 1 prefetched one
gathered at w = 2 B, beside the layer's unsharded gradient at the recipe's g = 4 B): 8L, twice DeepSpeed's 4L.
The states agree to the byte; the tests state both gather figures.
"""
import pytest

from fitplan import presets
from fitplan.counts import params as P
from fitplan.memory.breakdown import Setup, evaluate
from fitplan.specs import ClusterSpec, Offload, ParallelConfig, Recompute, TrainingSpec, ZeroStage
from fitplan.specs.training import Recipe

G = N = 8          # one node of 8 GPUs
BUFFER = 1.5       # the estimators' additional_buffer_factor default
GiB = 2**30


def deepspeed_zero2(P_, *, offload):
    """(cpu bytes per node, gpu bytes per GPU), the formulas of the table above."""
    if offload:
        return P_ * max(4 * N, 16) * BUFFER, 2 * P_
    return P_ * 4 * G * BUFFER, 2 * P_ + int(18 * P_ / N)


def deepspeed_zero3(P_, L, *, offload_optimizer, offload_param, zero_init=True):
    n = N // G
    if offload_optimizer and offload_param:
        return (P_ * 18 / n * BUFFER if zero_init else P_ * max(4 * G, 18 / n) * BUFFER), 4 * L
    if offload_optimizer:
        return (P_ * 16 / n * BUFFER if zero_init else P_ * max(4 * G, 16 / n) * BUFFER), 4 * L + int(2 * P_ / N)
    return (L * 4 * G * BUFFER if zero_init else P_ * 4 * G * BUFFER), 4 * L + int(18 * P_ / N)


DS18 = presets.recipe("megatron-fp32-grad")
# DeepSpeed's ZeRO-2 without offload keeps the 16-bit gradient partition (2P/N) and, for the step, an fp32 copy
# of it (4P/N) sharded with the optimizer state: 16-bit gradients and 12 B of optimizer-side state.
DS18_ZERO2 = Recipe(name="deepspeed-zero2", weights_bytes=2, grads_bytes=2, master_bytes=4,
                    moments=(("adam_m", 4), ("adam_v", 4), ("fp32_grad", 4)))


def fitplan_figures(model_name, *, zero, offload, recipe=DS18):
    """(host bytes per node, state bytes per GPU, the ZeRO-3 gather buffer per GPU) from fitplan: the
    gather is runtime/fsdp_buffers at its largest over the step."""
    model = presets.model(model_name).model
    setup = Setup(model, TrainingSpec(seq_len=4096, recipe=recipe, global_batch=1024),
                  ClusterSpec(gpu=presets.gpu("h100-80gb"), num_gpus=N, gpus_per_node=G, reserve_bytes=0))
    b = evaluate(setup, ParallelConfig(dp=N, zero=zero, offload=offload, recompute=Recompute.FULL))
    return b.host_per_node_bytes, b.state_bytes, b.parts["runtime/fsdp_buffers"]


def fitplan_gather(model) -> int:
    """fitplan's ZeRO-3 buffer at a layer's backward, by hand: (1 + k)*w*P_layer + g*P_layer with k = 1
    (FSDP2's prefetch default), w = 2 and g = 4 (DS18); the layer is the largest unit (a transformer
    layer outweighs the output layer in both models)."""
    layer = P.layer_sharded_params(model) + P.layer_replicated_params(model)
    assert layer > P.head_params(model)
    return (1 + 1) * 2 * layer + 4 * layer


def largest_layer(model) -> int:
    """fitplan's largest layer (analysis.largest_unmodelled): a transformer layer or the embedding."""
    return max(P.layer_sharded_params(model) + P.layer_replicated_params(model), P.embedding_params(model))


MODELS = ("llama2-7b", "llama2-70b")


@pytest.mark.parametrize("name", MODELS)
def test_the_models_and_their_largest_layers(name):
    model = presets.model(name).model
    P_ = P.num_params(model)
    assert P_ == {"llama2-7b": 6_738_415_616, "llama2-70b": 68_976_648_192}[name]   # HF Llama-2 counts
    assert largest_layer(model) == {"llama2-7b": 202_383_360, "llama2-70b": 855_654_400}[name]
    assert P_ % N == 0   # so DeepSpeed's int(18P/N) and fitplan's per-component ceil(bP/N) agree to the byte


@pytest.mark.parametrize("name", MODELS)
def test_zero2_offload_optimizer(name):
    """GPU: 2P, the same. CPU: DeepSpeed's max(4N, 16)*1.5 budgets each of the N ranks building the model in
    fp32 on the CPU (4N = 32 here) before the optimizer is set up, times its buffer factor; fitplan counts
    what training holds, the 16 of that max: the fp32 weights, fp32 gradients and moments."""
    P_ = P.num_params(presets.model(name).model)
    ds_cpu, ds_gpu = deepspeed_zero2(P_, offload=True)
    host, gpu, _ = fitplan_figures(name, zero=ZeroStage.OS_G, offload=Offload.OPTIMIZER)
    assert gpu == ds_gpu == 2 * P_
    assert host == 16 * P_
    assert ds_cpu == 32 * P_ * BUFFER      # the load-time term wins at 8 GPUs: 4N = 32 > 16


@pytest.mark.parametrize("name", MODELS)
def test_zero2_without_offload(name):
    """GPU: 2P + 18P/N with DeepSpeed's split of the 18 bytes under ZeRO-2 (16-bit gradient partition and its
    fp32 copy); with the 18-byte recipe's fp32 gradients alone fitplan has 2P/N less, the bf16 partition.
    CPU: DeepSpeed's 4P*G*1.5 is the fp32 model each rank builds before training; fitplan offloads nothing."""
    P_ = P.num_params(presets.model(name).model)
    ds_cpu, ds_gpu = deepspeed_zero2(P_, offload=False)
    host, gpu, _ = fitplan_figures(name, zero=ZeroStage.OS_G, offload=Offload.NONE, recipe=DS18_ZERO2)
    assert gpu == ds_gpu
    assert fitplan_figures(name, zero=ZeroStage.OS_G, offload=Offload.NONE)[1] == ds_gpu - 2 * P_ // N
    assert host == 0 and ds_cpu == 4 * P_ * G * BUFFER


@pytest.mark.parametrize("name", MODELS)
def test_zero3_offload_optimizer_and_params(name):
    """GPU: no state stays; DeepSpeed budgets 4L for the gathered layer, fitplan 8L (the prefetched layer and the
    unsharded fp32 gradient beside it). CPU (zero_init): 18P per node, the same once DeepSpeed's 1.5 buffer
    factor is taken off."""
    model = presets.model(name).model
    P_ = P.num_params(model)
    ds_cpu, ds_gpu = deepspeed_zero3(P_, largest_layer(model), offload_optimizer=True, offload_param=True)
    host, gpu, gather = fitplan_figures(name, zero=ZeroStage.OS_G_P, offload=Offload.OPTIMIZER_PARAMS)
    L = largest_layer(model)
    assert gpu == 0 and ds_gpu == 4 * L and gather == fitplan_gather(model) == 8 * L
    assert host == 18 * P_ == ds_cpu / BUFFER


@pytest.mark.parametrize("name", MODELS)
def test_zero3_offload_optimizer(name):
    model = presets.model(name).model
    P_ = P.num_params(model)
    ds_cpu, ds_gpu = deepspeed_zero3(P_, largest_layer(model), offload_optimizer=True, offload_param=False)
    host, gpu, gather = fitplan_figures(name, zero=ZeroStage.OS_G_P, offload=Offload.OPTIMIZER)
    assert gpu == 2 * P_ // N and gpu + 4 * largest_layer(model) == ds_gpu and gather == fitplan_gather(model)
    assert host == 16 * P_ == ds_cpu / BUFFER


@pytest.mark.parametrize("name", MODELS)
def test_zero3_without_offload(name):
    """CPU: DeepSpeed's 4L*G*1.5 (zero_init) is each rank materialising its largest layer in fp32 while the
    model is built; fitplan counts no host memory without offload."""
    model = presets.model(name).model
    P_ = P.num_params(model)
    ds_cpu, ds_gpu = deepspeed_zero3(P_, largest_layer(model), offload_optimizer=False, offload_param=False)
    host, gpu, gather = fitplan_figures(name, zero=ZeroStage.OS_G_P, offload=Offload.NONE)
    assert gpu + 4 * largest_layer(model) == ds_gpu and gpu == 18 * P_ // N and gather == fitplan_gather(model)
    assert host == 0 and ds_cpu == largest_layer(model) * 4 * G * BUFFER


def test_zero3_without_zero_init_budgets_the_whole_model_per_rank():
    """zero_init=0: every rank builds the whole fp32 model on the CPU first, P*max(4G, 18/n)*1.5; training
    then holds fitplan's 18P (offloaded) per node, which the max's other operand is."""
    P_ = P.num_params(presets.model("llama2-7b").model)
    ds_cpu, _ = deepspeed_zero3(P_, 0, offload_optimizer=True, offload_param=True, zero_init=False)
    assert ds_cpu == P_ * 32 * BUFFER
    assert fitplan_figures("llama2-7b", zero=ZeroStage.OS_G_P, offload=Offload.OPTIMIZER_PARAMS)[0] == 18 * P_


# The table, as DeepSpeed prints it ("per CPU | per GPU", bytes / 2^30) and as fitplan gives it (host memory per
# node | states per GPU + the ZeRO-3 gather buffer), for the record (docs/formulas.md#offload cites it). The ZeRO-3
# rows differ on the GPU by the gather alone: fitplan's 8L (runtime/fsdp_buffers) against DeepSpeed's 4L.
TABLE = {
    ("llama2-7b", "zero2 offload_optimizer"): ((301.23, 12.55), (100.41, 12.55)),
    ("llama2-7b", "zero2 none"): ((301.23, 26.67), (0.00, 26.67)),
    ("llama2-7b", "zero3 offload_param+optimizer"): ((169.44, 0.75), (112.96, 1.51)),
    ("llama2-7b", "zero3 offload_optimizer"): ((150.62, 2.32), (100.41, 3.08)),
    ("llama2-7b", "zero3 none"): ((9.05, 14.87), (0.00, 15.63)),
    ("llama2-70b", "zero2 offload_optimizer"): ((3083.50, 128.48), (1027.83, 128.48)),
    ("llama2-70b", "zero2 none"): ((3083.50, 273.02), (0.00, 273.02)),
    ("llama2-70b", "zero3 offload_param+optimizer"): ((1734.47, 3.19), (1156.31, 6.38)),
    ("llama2-70b", "zero3 offload_optimizer"): ((1541.75, 19.25), (1027.83, 22.43)),
    ("llama2-70b", "zero3 none"): ((38.25, 147.73), (0.00, 150.91)),
}


@pytest.mark.parametrize("key", sorted(TABLE))
def test_the_table(key):
    name, row = key
    model = presets.model(name).model
    P_, L = P.num_params(model), largest_layer(model)
    ds = {"zero2 offload_optimizer": lambda: deepspeed_zero2(P_, offload=True),
          "zero2 none": lambda: deepspeed_zero2(P_, offload=False),
          "zero3 offload_param+optimizer": lambda: deepspeed_zero3(P_, L, offload_optimizer=True, offload_param=True),
          "zero3 offload_optimizer": lambda: deepspeed_zero3(P_, L, offload_optimizer=True, offload_param=False),
          "zero3 none": lambda: deepspeed_zero3(P_, L, offload_optimizer=False, offload_param=False)}[row]()
    zero, offload, recipe = {
        "zero2 offload_optimizer": (ZeroStage.OS_G, Offload.OPTIMIZER, DS18),
        "zero2 none": (ZeroStage.OS_G, Offload.NONE, DS18_ZERO2),
        "zero3 offload_param+optimizer": (ZeroStage.OS_G_P, Offload.OPTIMIZER_PARAMS, DS18),
        "zero3 offload_optimizer": (ZeroStage.OS_G_P, Offload.OPTIMIZER, DS18),
        "zero3 none": (ZeroStage.OS_G_P, Offload.NONE, DS18)}[row]
    host, gpu, gather = fitplan_figures(name, zero=zero, offload=offload, recipe=recipe)
    expected_ds, expected_fitplan = TABLE[key]
    assert (round(ds[0] / GiB, 2), round(ds[1] / GiB, 2)) == expected_ds
    assert (round(host / GiB, 2), round((gpu + gather) / GiB, 2)) == expected_fitplan
