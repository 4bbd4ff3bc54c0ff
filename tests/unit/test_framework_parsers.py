"""Exports read by the frameworks themselves, where they install, and by each version's own field
names, recorded as data where they do not (tests/data/):

  torchtitan  every key of every version's export is a field of that version's config classes
              (tests/data/torchtitan_fields.json: 0.2.2 at its tag, 0.3.0 from its package, main at
              b5bcd76); with torchtitan installed (the test extras pin 0.3.0) the 0.3 export is
              executed on 0.3.0's own TrainingConfig, ParallelismConfig and activation
              checkpointing configs, whose dataclasses have slots: an unknown field raises.
  DeepSpeed   with deepspeed installed (the test extras pin 0.19.8), every config is read by its
              DeepSpeedConfig, batch check included, and its expert_parallel section by AutoEP's
              validate_autoep_config, in a child process (DeepSpeed sets up torch.distributed).
  Megatron-LM the option list in tests/data/megatron_flags.json (tests/unit/test_export.py parses
              every export with it; test_export_coverage.py reads every field back through it).
"""
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fitplan.export import export
from tests.unit.test_export_coverage import plans

DATA = json.loads((Path(__file__).parents[1] / "data" / "torchtitan_fields.json").read_text())["versions"]
PLANS = [p.values[0] for p in plans()]


def written_keys(result, version) -> dict:
    """section -> the keys the export sets."""
    if version == "0.2":
        doc = tomllib.loads(result.text)
        return {section: set(values) for section, values in doc.items()}
    out: dict = {}
    for key in result.data:
        if "." in key:
            section, name = key.split(".", 1)
            out.setdefault(section, set()).add(name)
    return out


@pytest.mark.parametrize("version", ["0.2", "0.3", "main"])
def test_every_torchtitan_key_is_a_field_of_that_version(version):
    fields = DATA[version]["fields"]
    exported = 0
    for plan in PLANS:
        for fmt in (("torchtitan",) if version == "0.2" else ("torchtitan", "torchtitan-python")):
            result = export(fmt, plan, torchtitan_version=version)
            if not result.ok:
                continue
            exported += 1
            for section, names in written_keys(result, version).items():
                assert names <= set(fields[section]), (version, section, names - set(fields[section]))
            if version != "0.2":
                policy = result.data["activation_checkpoint"]
                assert {"full": "FullAC", "selective": "SelectiveAC"}.get(policy, "FullAC") in \
                    fields["activation_checkpoint_policies"]
    assert exported > 40


def test_the_versions_differ_where_torchtitan_changed():
    """0.3.0 still counts samples (local_batch_size, seq_len) and has pipeline_parallel_microbatch_size;
    main counts tokens and pipeline micro-batches: each version's export uses its own names."""
    assert {"local_batch_size", "seq_len"} <= set(DATA["0.3"]["fields"]["training"])
    assert "num_pp_microbatches" not in DATA["0.3"]["fields"]["parallelism"]
    assert "num_pp_microbatches" in DATA["main"]["fields"]["parallelism"]
    assert "seq_len" not in DATA["main"]["fields"]["training"]
    plan = next(p for p in PLANS if p.parallel.pp > 1 and p.model.name == "llama3.1-8b")
    v3, main = (export("torchtitan", plan, torchtitan_version=v) for v in ("0.3", "main"))
    assert v3.data["training.seq_len"] == 8192 and "parallelism.num_pp_microbatches" not in v3.data
    assert main.data["training.max_context_length"] == 8192
    # one pipeline micro-batch of b sequences per forward; the local batch is num_pp_microbatches of them
    b, m = plan.parallel.micro_batch, plan.num_microbatches
    assert main.data["training.num_tokens_per_microbatch_per_dp_rank"] == b * 8192
    assert main.data["parallelism.num_pp_microbatches"] == m
    assert m * b * plan.parallel.dp == plan.global_batch


def test_torchtitan_0_3_reads_the_export_with_its_own_classes():
    config_mod = pytest.importorskip("torchtitan.config", reason="torchtitan 0.3.0 is in the test extras")
    import dataclasses
    import types

    import torchtitan
    import torchtitan.distributed.activation_checkpoint as ac
    assert torchtitan.__version__.startswith("0.3"), torchtitan.__version__
    live = {"training": config_mod.TrainingConfig, "parallelism": config_mod.ParallelismConfig}
    for section, cls in live.items():   # the recorded names are the installed package's
        assert sorted(f.name for f in dataclasses.fields(cls)) == DATA["0.3"]["fields"][section]
    checked = 0
    for plan in PLANS:
        result = export("torchtitan", plan, torchtitan_version="0.3")
        if not result.ok:
            continue
        config = types.SimpleNamespace(training=config_mod.TrainingConfig(),
                                       parallelism=config_mod.ParallelismConfig())
        exec(result.text, {"config": config})     # slots: a field 0.3.0 lacks raises AttributeError
        # and each section constructs with those values (its __post_init__ checks them)
        for section, cls in live.items():
            obj = getattr(config, section)
            cls(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(cls)})
        assert config.activation_checkpoint is None or isinstance(
            config.activation_checkpoint, (ac.FullAC.Config, ac.SelectiveAC.Config))
        assert config.parallelism.expert_parallel_degree == plan.parallel.ep
        assert config.training.global_batch_size == plan.global_batch
        checked += 1
    assert checked > 40


DEEPSPEED_CHECK = r'''
import json, os, sys
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
import deepspeed
import deepspeed.comm.torch
# a CPU all-reduce kernel that init_distributed compiles (minutes, once); no config reading needs it.
# (the module by its full name: deepspeed.comm's attribute "torch" is the torch package)
sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
deepspeed.init_distributed(dist_backend="gloo")
from deepspeed.runtime.config import DeepSpeedConfig
from deepspeed.module_inject.auto_ep_config import validate_autoep_config


class Mpu:   # the data-parallel size of the run the config is for (DeepSpeedConfig's batch check)
    def __init__(self, dp): self.dp = dp
    def get_data_parallel_world_size(self): return self.dp
    def get_data_parallel_rank(self): return 0
    def get_model_parallel_world_size(self): return 1
    def get_model_parallel_rank(self): return 0


out = []
for config, dp in json.load(open(sys.argv[1])):
    c = DeepSpeedConfig(config, mpu=Mpu(dp))
    if config.get("expert_parallel"):
        validate_autoep_config(c.expert_parallel_config, world_size=dp, pp_size=1, tp_size=1, sp_size=1,
                               zero_stage=c.zero_optimization_stage)
    out.append([c.train_batch_size, c.zero_optimization_stage, c.bfloat16_config.enabled,
                c.expert_parallel_config.autoep_size if c.expert_parallel_config.enabled else 1])
print(json.dumps(out))
'''


def test_deepspeed_reads_every_config(tmp_path):
    pytest.importorskip("deepspeed", reason="deepspeed 0.19.8 is in the test extras")
    cases = []
    for plan in PLANS:
        result = export("deepspeed", plan)
        if result.ok:
            cases.append((plan, result.data))
    assert len(cases) > 30 and any(plan.model.moe for plan, _ in cases)
    path = tmp_path / "configs.json"
    path.write_text(json.dumps([[data, plan.parallel.dp] for plan, data in cases]))
    script = tmp_path / "check.py"
    script.write_text(DEEPSPEED_CHECK)
    run = subprocess.run([sys.executable, str(script), str(path), "29617"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    read = json.loads(run.stdout.strip().splitlines()[-1])
    for (plan, _), (batch, stage, bf16, ep) in zip(cases, read):
        assert (batch, stage, ep) == (plan.global_batch, int(plan.parallel.zero), plan.parallel.ep)
        assert bf16 == (plan.training.recipe.weights_bytes == 2)
