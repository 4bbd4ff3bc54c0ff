"""One pipeline rank's memory over the step, event by event: every forward and backward of its schedule, then the
optimizer step, each at its highest moment, for the one configuration a report draws (--plot-timeline, the
configuration report's table, the JSON's timeline). The largest event is the closed form's peak,
fitplan.memory.timeline.moments (tests/unit/test_timeline.py); the search and the exact checks use that closed
form only.
"""
from fitplan.explain import RAW
from fitplan.memory import activations as A
from fitplan.memory import runtime as RT
from fitplan.memory.breakdown import UNBOUNDED_MICROBATCHES, stage_memory
from fitplan.memory.stages import stage_at
from fitplan.memory.timeline import (ALWAYS, FSDP_FORWARD, FSDP_LOSS, LAYER, LOSS, LOSS_FORWARD, OUTPUT_ONE, STEP,
                                     STORED, STREAMS, TRAIN, transient_bytes)
from fitplan.record import record
from fitplan.specs.parallel import Schedule

GROUPS = ("states", "runtime", "activations")


def group_of(key: str) -> str:
    return key.split("/", 1)[0]


@record(slots=True)
class Event:
    phase: str           # "forward of micro-batch 3", "backward of micro-batch 1 (loss)", "optimizer step"
    bytes: int
    held: dict           # key -> bytes
    repeat: int = 1      # a steady-state pair shown once stands for this many

    def by_group(self) -> dict:
        out = dict.fromkeys(GROUPS, 0)
        for k, v in self.held.items():
            out[group_of(k)] += v
        return out


def _label(kind: str, i: int, *, p: int, v: int, schedule: str) -> str:
    """The micro-batch (and model chunk, interleaved) of the i-th forward or backward chunk of
    a rank (0-based): Megatron-LM's order, groups of p micro-batches per model chunk."""
    if v == 1 or schedule in ("gpipe", "dualpipe"):
        return f"{kind} of micro-batch {i + 1}"
    mb = (i // (p * v)) * p + i % p
    chunk = (i % (p * v)) // p
    if kind == "backward":
        chunk = v - 1 - chunk
    return f"{kind} of micro-batch {mb + 1} (chunk {chunk + 1})"


def timeline(parts: dict, *, phi, chunks: int, m: int, v: int, p: int, schedule: str, head: bool) -> tuple:
    """Every forward and backward of the rank's schedule, then the optimizer step, each at its
    highest moment. chunks: the model chunks held at the first backward (the closed form's
    `chunks_in_flight`); each forward stores one chunk's share of the stored activations and each
    backward frees one. The steady state's identical forward/backward pairs are shown once with
    their count. The largest event is the closed form's peak (tests/unit/test_timeline.py)."""
    total = m * v
    stored_all = {k: parts[k] for k in STORED}
    base = {k: parts[k] for k in ALWAYS + TRAIN}

    def at(held):
        held = dict(held)
        held["runtime/allocator"] = int(RT.allocator_bytes(phi=phi, D=transient_bytes(held), streams=parts[STREAMS]))
        return {k: int(x) for k, x in held.items()}

    def stored(k):
        return {key: -(-value * k // chunks) for key, value in stored_all.items()}

    def forward(k, i, last_chunk):
        held = {**base, **stored(k), "runtime/fsdp_buffers": parts[FSDP_FORWARD],
                "activations/moe_buffers": parts["activations/moe_buffers"],
                "runtime/dequant_workspace": parts["runtime/dequant_workspace"]}
        if head and last_chunk:
            held["runtime/logits_grad"] = parts[LOSS_FORWARD]
        return _event(_label("forward", i, p=p, v=v, schedule=schedule), at(held))

    def backward(k, i, last_chunk):
        held = {**base, **stored(k)}
        out = []
        if head and last_chunk:
            out.append(_event(_label("backward", i, p=p, v=v, schedule=schedule) + " (loss)",
                              at({**held, **{key: parts[key] for key in LOSS}, "runtime/fsdp_buffers": parts[FSDP_LOSS]})))
        held.update({key: parts[key] for key in LAYER})
        if head and last_chunk:
            held["activations/output"] = max(0, held["activations/output"] - parts[OUTPUT_ONE])
        out.append(_event(_label("backward", i, p=p, v=v, schedule=schedule), at(held)))
        return out

    def is_last_chunk(i, kind):
        if v == 1 or schedule in ("gpipe", "dualpipe"):
            return True
        chunk = (i % (p * v)) // p
        return (chunk == v - 1) if kind == "forward" else (chunk == 0)

    warm = chunks - 1
    events, k, f, b = [], 0, 0, 0
    for _ in range(warm):
        k += 1
        events.append(forward(k, f, is_last_chunk(f, "forward")))
        f += 1
    steady = total - warm
    for j in range(min(steady, 1)):
        k += 1
        events.append(forward(k, f, is_last_chunk(f, "forward")))
        pair = backward(k, b, is_last_chunk(b, "backward"))
        events += pair
        k -= 1
        f += steady
        b += steady
    if steady > 1:
        first_of_pair = len(events) - len(pair) - 1
        events[first_of_pair:] = [Event(e.phase, e.bytes, e.held, steady) for e in events[first_of_pair:]]
    for _ in range(warm):
        events += backward(k, b, is_last_chunk(b, "backward"))
        k -= 1
        b += 1
    events.append(_event("optimizer step", at({**{key: parts[key] for key in ALWAYS},
                                               **{key: parts[key] for key in STEP}})))
    return tuple(events)


def _event(phase: str, held: dict) -> Event:
    return Event(phase, sum(held.values()), held)


def stage_timeline(setup, b) -> tuple:
    """The busiest rank's memory over the step, event by event (timeline, above) for b, an evaluated Breakdown
    (fitplan.memory.breakdown.evaluate): its schedule's forwards and backwards, then the optimizer step; the
    largest is b's peak."""
    c = b.config
    st = stage_at(RAW, setup.model, c, b.stage_index)
    dual = c.schedule == Schedule.DUALPIPE
    m = UNBOUNDED_MICROBATCHES if setup.training.global_batch is None else setup.training.global_batch // (c.dp * c.micro_batch)
    v = 2 if dual else c.virtual_stages
    chunks = int(A.chunks_in_flight(p=c.pp, v=v, r=b.stage_index, m=m, schedule=str(c.schedule)))
    parts = stage_memory(RAW, setup, c, stage=st)   # each term as its moments hold it, not b.parts' largest
    return timeline(parts, phi=setup.training.fragmentation, chunks=chunks, m=m, v=v, p=c.pp,
                    schedule=str(c.schedule), head=bool(st.head))
