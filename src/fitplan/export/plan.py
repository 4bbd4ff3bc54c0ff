"""What the exporters take and give back.

A Plan is one checked configuration: the model, the training setup, the degrees, the
global batch and the GPU count. An exporter returns either Exported (the text to hand to
the framework, the same content parsed, and notes on what the plan assumes that the
framework does differently) or Unsupported (every reason the framework cannot express
the plan). It never returns a config that means something other than the plan.
"""
from dataclasses import replace
from types import SimpleNamespace

from fitplan.counts import stages as ST
from fitplan.errors import SpecError, one_line
from fitplan.record import record
from fitplan.specs import ModelSpec, ParallelConfig, TrainingSpec, compat
from fitplan.specs.parallel import Schedule
from fitplan.specs._check import positive_int


@record(slots=True, kw_only=True)
class Plan:
    model: ModelSpec
    training: TrainingSpec
    parallel: ParallelConfig
    global_batch: int     # sequences per optimizer step
    num_gpus: int
    gpus_per_node: int | None = None   # the node (NVLink domain) size, when a cluster is known
    picked: str = ""      # how the layout was chosen ("recommended", "minimum viable"), or "" when given

    def __post_init__(self) -> None:
        positive_int("plan", "global_batch", self.global_batch, maximum=10**12)
        positive_int("plan", "num_gpus", self.num_gpus, maximum=10**9)
        c = self.parallel
        if c.world_size != self.num_gpus:
            raise SpecError(f"the plan has tp x pp x dp x cp = {c.tp} x {c.pp} x {c.dp} x {c.cp} = {c.world_size} "
                            f"ranks but {self.num_gpus} GPUs; make the product equal the GPU count")
        # Every rule but the node-size one, which needs a cluster: exporters run anywhere.
        anywhere = SimpleNamespace(gpus_per_node=self.num_gpus, num_gpus=self.num_gpus)
        training = replace(self.training, global_batch=self.global_batch)
        violations = compat.check(self.model, training, anywhere, c, allow_cross_node_tp=True)
        if violations:
            raise SpecError(violations[0].message)

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per data-parallel rank per step: gradient-accumulation steps
        without pipelining, micro-batches through the pipeline with it."""
        return self.global_batch // (self.parallel.dp * self.parallel.micro_batch)

    @property
    def pinned(self) -> bool:
        """Whether --first-stage-layers or --last-stage-layers pins a pipeline end."""
        return self.parallel.first_stage_layers is not None or self.parallel.last_stage_layers is not None

    @property
    def stage_layers(self) -> tuple[int, ...]:
        """Transformer layers on each pipeline stage, stage 0 first (fitplan.counts.stages.split)."""
        c = self.parallel
        return ST.split(self.model.num_layers, c.pp, c.virtual_stages, c.first_stage_layers, c.last_stage_layers)

    @property
    def chunk_layers(self) -> tuple[int, ...]:
        """Transformer layers of each of the pp x v model chunks in pipeline order (chunk j sits
        on stage j mod pp, as Megatron-LM's layout and torch's looped schedules place them).
        The default split gives every chunk its own count; with pinned ends fitplan counts only
        a stage's total, so each stage's layers are spread over its v chunks as evenly as
        possible, extras on the later chunks."""
        c, L = self.parallel, self.model.num_layers
        P = c.pp * c.virtual_stages
        if not self.pinned:
            return tuple(int(ST.chunk_layers(L, P, j)) for j in range(P))
        per_stage = [[n // c.virtual_stages + (k >= c.virtual_stages - n % c.virtual_stages)
                      for k in range(c.virtual_stages)] for n in self.stage_layers]
        return tuple(per_stage[j % c.pp][j // c.pp] for j in range(P))


def make_plan(*, model: ModelSpec, training: TrainingSpec, parallel: ParallelConfig,
              global_batch: int | None = None, num_gpus: int | None = None, gpus_per_node: int | None = None,
              picked: str = "") -> Plan:
    """A Plan, taking the global batch from the training spec and the GPU count from the
    degrees when they are not given."""
    global_batch = training.global_batch if global_batch is None else global_batch
    if global_batch is None:
        raise SpecError("exporting needs a global batch (sequences per step); every framework asks for one: "
                        "pass --global-batch")
    return Plan(model=model, training=training, parallel=parallel, global_batch=global_batch,
                num_gpus=parallel.world_size if num_gpus is None else num_gpus, gpus_per_node=gpus_per_node,
                picked=picked)


@record(slots=True, kw_only=True)
class Exported:
    format: str
    filename: str        # a conventional name for the file
    text: str            # what to write to that file
    data: object         # the same content parsed: an argv list, a dict, or the snippet's assignments
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return True


@record(slots=True, kw_only=True)
class Unsupported:
    format: str
    reasons: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return False

    @property
    def message(self) -> str:
        return f"{self.format} cannot express this plan: " + "; ".join(self.reasons)


def describe(plan: Plan) -> str:
    """One line naming the plan, for a comment in the header of an exported file. Names are
    printable one-liners (the specs refuse control characters), and escaped here again: a
    line break in a shell or Python comment would start a command."""
    return one_line(_describe(plan))


def _describe(plan: Plan) -> str:
    c = plan.parallel
    extras = [f"zero={int(c.zero)}", f"recompute={c.recompute.value}", f"micro-batch={c.micro_batch}"]
    if c.ep > 1:
        extras.insert(0, f"ep={c.ep}")
    if c.offload.value != "none":
        extras.append(f"offload={c.offload.value}")
    if c.sequence_parallel:
        extras.append("sp")
    if c.virtual_stages > 1:
        extras.append(f"v={c.virtual_stages}")
    if c.schedule != Schedule.ONE_F_ONE_B:
        extras.append(f"schedule={c.schedule.value}")
    if plan.pinned:
        extras.append("stage layers " + ",".join(str(n) for n in plan.stage_layers))
    if c.shard_degree is not None:
        extras.append(f"shard-degree={c.shard_degree}")
    if not c.reshard_after_forward:
        extras.append("no-reshard-after-forward")
    if c.recompute_num_layers is not None:
        extras.append(f"recompute-layers={c.recompute_num_layers} {c.recompute_method.value}")
    picked = f"the {plan.picked} layout of 'fitplan plan --suggest', " if plan.picked else ""
    return (f"{picked}{plan.model.name}: tp={c.tp} pp={c.pp} dp={c.dp} cp={c.cp} {' '.join(extras)} on "
            f"{plan.num_gpus} GPUs, global batch {plan.global_batch} x {plan.training.seq_len} tokens, "
            f"precision {plan.training.recipe.name}")


def adapter_and_offload_reasons(plan: Plan, framework: str, offloads: tuple[str, ...] = ()) -> list:
    """Why an exporter cannot express the plan's adapters or its offload (offloads: the
    values this framework's config can say)."""
    out = []
    t, o = plan.training, plan.parallel.offload.value
    if plan.model.hybrid:
        out.append(f"a hybrid Mamba model (layers {plan.model.layer_pattern[:24]}"
                   f"{'...' if plan.model.num_layers > 24 else ''}): fitplan writes transformer layers for "
                   f"{framework}, not a hybrid model's configuration (Megatron-LM's pretrain_mamba.py with "
                   f"--hybrid-override-pattern is not exported)")
    if t.finetune != "full":
        out.append(f"--finetune {t.finetune}: the adapters and the frozen base are set up in code (peft's "
                   f"LoraConfig / bitsandbytes), not in a {framework} config; exported, it would train every weight")
    if o != "none" and o not in offloads:
        out.append(f"--offload {o}: {framework}'s config has no setting for it here")
    return out
