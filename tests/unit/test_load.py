"""fitplan.files.load: spec files in TOML and JSON, units in values, strict keys, and the
dump that every preset loads back from identically (STYLE 5.7)."""
import json
import tomllib

import pytest

from fitplan.errors import SpecError
from fitplan.presets import GPUS, MODELS, RECIPES
from fitplan.specs import ClusterSpec, Mlp, TrainingSpec
from fitplan.files.load import (dump_toml, load_cluster, load_gpu, load_model, load_recipe, load_specs,
                                load_training, rate_text, seconds_text, size_text)
from fitplan.units import GB, GiB


def write(tmp_path, text: str, name: str = "spec.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------- round trips

@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_preset_round_trips(tmp_path, name):
    model = MODELS[name].model
    assert load_model(write(tmp_path, dump_toml(model))) == model


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_gpu_preset_round_trips(tmp_path, name):
    assert load_gpu(write(tmp_path, dump_toml(GPUS[name]))) == GPUS[name]


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_preset_round_trips(tmp_path, name):
    assert load_recipe(write(tmp_path, dump_toml(RECIPES[name]))) == RECIPES[name]


@pytest.mark.parametrize("name", sorted(RECIPES))
@pytest.mark.parametrize("global_batch", [None, 1536])
def test_training_with_its_recipe_round_trips(tmp_path, name, global_batch):
    training = TrainingSpec(seq_len=4096, recipe=RECIPES[name], global_batch=global_batch, act_bytes=2, dropout=False)
    assert load_training(write(tmp_path, dump_toml(training))) == training


def test_one_file_with_every_table_round_trips(tmp_path):
    model = MODELS["gpt3-175b"].model
    training = TrainingSpec(seq_len=2048, recipe=RECIPES["fp8"], global_batch=1536)
    cluster = ClusterSpec(gpu=GPUS["h200-141gb"], num_gpus=1024, gpus_per_node=8, reserve_bytes=10 * GiB)
    specs = load_specs(write(tmp_path, dump_toml(model, training, cluster)))
    assert (specs.model, specs.training, specs.cluster, specs.gpu) == (model, training, cluster, cluster.gpu)
    assert specs.recipe is None


def test_dump_is_toml_with_units_in_values():
    text = dump_toml(GPUS["h100-80gb"])
    data = tomllib.loads(text)["gpu"]
    assert data["memory"] == "81559 MiB"           # 85,520,809,984 B: what nvidia-smi reports, as the preset states it
    assert data.get("default_reserve", "0 B") == "0 B"   # no reserve: the runtime buffers are terms of the peak
    assert data["peak_bf16_flops_per_s"] == 989e12
    assert data["intra_node"] == {"name": "NVLink 4", "bandwidth": "450 GB/s", "latency": "3.4 us",
                                  "bus_efficiency": 0.82}
    assert 'memory = "143771 MiB"' in dump_toml(GPUS["h200-141gb"])   # no whole number of GiB: MiB


@pytest.mark.parametrize(("value", "text"), [(80 * GiB, "80 GiB"), (141 * GB, "141 GB"), (2**40, "1 TiB"),
                                             (1536 * 2**20, "1536 MiB"), (0, "0 B"), (12345, "12345 B")])
def test_size_text(value, text):
    assert size_text(value) == text


@pytest.mark.parametrize(("value", "text"), [(450e9, "450 GB/s"), (25e9, "25 GB/s"), (1.8e12, "1.8 TB/s"),
                                             (448e9, "448 GB/s"), (12.5e6, "12.5 MB/s")])
def test_rate_text(value, text):
    assert rate_text(value) == text


@pytest.mark.parametrize(("value", "text"), [(3e-6, "3 us"), (8e-6, "8 us"), (1.5e-3, "1.5 ms"), (0.0, "0 s"),
                                             (2.0, "2 s"), (250e-9, "250 ns")])
def test_seconds_text(value, text):
    assert seconds_text(value) == text


# ---------------------------------------------------------------- reading

GPU_TOML = """
[gpu]
name = "my-gpu"
memory = "80 GiB"
peak_bf16_flops_per_s = 989e12
efficiency = 0.5
[gpu.intra_node]
name = "nvlink"
bandwidth = "450 GB/s"
latency = "5 us"
[gpu.inter_node]
name = "ib"
bandwidth = "400 Gb/s"
latency = "8 us"
"""


def test_units_in_values(tmp_path):
    gpu = load_gpu(write(tmp_path, GPU_TOML))
    assert gpu.memory_bytes == 85_899_345_920                  # 80 * 2**30
    assert gpu.intra_node.bytes_per_s == 450e9                 # decimal rate
    assert gpu.intra_node.latency_s == 5e-6
    assert gpu.inter_node.bytes_per_s == 50e9                  # 400 Gb/s = 50 GB/s
    assert gpu.peak_fp8_flops_per_s is None and gpu.default_reserve_bytes == 0 and gpu.gpus_per_node == 8


def test_json_has_the_same_layout(tmp_path):
    data = {"gpu": tomllib.loads(GPU_TOML)["gpu"] | {"peak_fp8_flops_per_s": None}}
    assert load_gpu(write(tmp_path, json.dumps(data), "spec.json")) == load_gpu(write(tmp_path, GPU_TOML))


MODEL_TOML = """
[model]
name = "m"
num_layers = 2
hidden_size = 64
num_heads = 4
num_kv_heads = 4
ffn_hidden_size = 256
vocab_size = 1000
max_seq_len = 128
"""


def test_model_defaults_are_the_dataclass_defaults(tmp_path):
    m = load_model(write(tmp_path, MODEL_TOML))
    assert m.mlp == Mlp.GELU and m.tied_embeddings and m.linear_bias and m.head_dim is None and m.source == ""


def test_training_recipe_by_preset_name(tmp_path):
    t = load_training(write(tmp_path, '[training]\nseq_len = 2048\nrecipe = "bf16-adam"\nglobal_batch = 64\n'))
    assert t.recipe == RECIPES["bf16-adam"] and t.global_batch == 64 and t.act_bytes == 2 and t.dropout


def test_cluster_from_a_gpu_preset(tmp_path):
    c = load_cluster(write(tmp_path, '[cluster]\ngpu = "a100-80gb"\nnum_gpus = 16\n'))
    assert c.gpu == GPUS["a100-80gb"] and c.gpus_per_node == 8 and c.reserve_bytes == 0   # the GPU's defaults
    c = load_cluster(write(tmp_path, '[cluster]\ngpu = "a100-80gb"\nnum_gpus = 16\nreserve = "2.5 GiB"\n'))
    assert c.reserve_bytes == 2_684_354_560                    # 2.5 * 2**30, exact


def test_cluster_with_its_gpu_table(tmp_path):
    c = load_cluster(write(tmp_path, GPU_TOML + "[cluster]\nnum_gpus = 8\n"))
    assert c.gpu.name == "my-gpu" and c.num_gpus == 8 and c.reserve_bytes == 0


@pytest.mark.parametrize(("text", "needle"), [
    (GPU_TOML.replace("memory =", "memroy ="), "unknown key 'gpu.memroy' (did you mean 'gpu.memory'?)"),
    (GPU_TOML.replace('memory = "80 GiB"', "memory = 80"),
     'gpu.memory = 80 has no unit; write it as a string with a unit, e.g. memory = "80 GiB"'),
    (GPU_TOML.replace('"80 GiB"', '"80 gigs"'), "gpu.memory: unknown unit 'gigs'"),
    (GPU_TOML.replace('"450 GB/s"', "450e9"), "gpu.intra_node.bandwidth = 450000000000.0 has no unit"),
    (GPU_TOML.replace('latency = "5 us"', 'latency = "5"'), "gpu.intra_node.latency: cannot read '5'"),
    (GPU_TOML.replace("efficiency = 0.5\n", ""), "missing key 'gpu.efficiency'; add it (a number)"),
    (GPU_TOML.replace("efficiency = 0.5", "efficiency = 1.5"), "gpu.efficiency must be in (0, 1]"),
    (GPU_TOML.replace("[gpu.inter_node]", "[gpu.inter_nodes]"),
     "unknown key 'gpu.inter_nodes' (did you mean 'gpu.inter_node'?)"),
    (GPU_TOML.replace("[gpu.inter_node]", "[gpu.other]"), "missing key 'gpu.inter_node'"),
    (MODEL_TOML.replace("num_layers = 2", 'num_layers = "2"'), "model.num_layers must be a whole number, got '2'"),
    (MODEL_TOML.replace("num_layers = 2", "num_layers = 2.0"), "model.num_layers must be a whole number, got 2.0"),
    (MODEL_TOML + 'mlp = "relu"\n', "model.mlp = 'relu' is not one of gelu, swiglu"),
    (MODEL_TOML + "tied_embeddings = 1\n", "model.tied_embeddings must be true or false"),
    (MODEL_TOML.replace("num_kv_heads = 4", "num_kv_heads = 3"), "not divisible by num_kv_heads 3"),
    (MODEL_TOML.replace("[model]", "[modle]"), "unknown table 'modle' (did you mean 'model'?)"),
    ('[training]\nseq_len = 2048\nrecipe = "mixed_adam"\n', "is not a precision preset (did you mean 'mixed-adam'?)"),
    ("[training]\nseq_len = 2048\n", "missing key 'training.recipe'"),
    ('[cluster]\ngpu = "h100"\nnum_gpus = 8\n', "is not a GPU preset (did you mean 'h100-80gb'?)"),
    ("[cluster]\nnum_gpus = 8\n", "the cluster has no GPU"),
    (GPU_TOML + '[cluster]\ngpu = "b200"\nnum_gpus = 8\n', "both name the GPU; keep one"),
    ("[model\nname = 1", "not valid TOML"),
])
def test_errors_are_one_line_naming_file_field_and_fix(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as err:
        load_specs(path)
    message = str(err.value)
    assert message.startswith(str(path)), message
    assert needle in message, message
    assert "\n" not in message


@pytest.mark.parametrize(("text", "needle"), [("[1, 2]", "the top level must be an object"),
                                              ('{"model": 3}', "model must be a table"),
                                              ('{"model": {', "not valid JSON")])
def test_json_errors(tmp_path, text, needle):
    with pytest.raises(SpecError, match=needle):
        load_specs(write(tmp_path, text, "spec.json"))


def test_file_errors(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_model(tmp_path / "missing.toml")
    with pytest.raises(SpecError, match="unknown spec file type '.yaml'"):
        load_model(write(tmp_path, "", "spec.yaml"))
    with pytest.raises(SpecError, match=r"no \[model\] table"):
        load_model(write(tmp_path, GPU_TOML))


def test_dump_refuses_what_it_cannot_write():
    with pytest.raises(TypeError):
        dump_toml("llama")
    with pytest.raises(ValueError, match="two ModelSpecs"):
        dump_toml(MODELS["gpt3-125m"].model, MODELS["gpt3-350m"].model)


def test_the_shipped_example_spec_file():
    from tests.unit.test_hf import EXAMPLES
    specs = load_specs(EXAMPLES.parent / "specs" / "llama3.1-8b-64xh100.toml")
    assert specs.model == MODELS["llama3.1-8b"].model
    assert (specs.training.seq_len, specs.training.global_batch, specs.training.recipe) == (8192, 512,
                                                                                          RECIPES["mixed-adam"])
    assert specs.cluster.gpu == GPUS["h100-80gb"] and specs.cluster.num_gpus == 64
    assert specs.cluster.usable_bytes == 85_520_809_984       # 81,559 MiB, no reserve (the preset's default)
