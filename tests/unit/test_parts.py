"""fitplan.parts: one table of the breakdown's and the step's parts, which every report,
chart and the page read; the core's PARTS tuples are its keys."""
import json

from fitplan import parts
from fitplan.memory.breakdown import HOST_KEYS as HOST_PARTS
from fitplan.memory.breakdown import PARTS as MEMORY_PARTS
from fitplan.timing.step import PARTS as TIME_PARTS


def test_the_core_parts_are_the_table_keys_in_order():
    assert MEMORY_PARTS + ("reserve",) + TIME_PARTS + HOST_PARTS == tuple(p.key for p in parts.TABLE)
    # 13 states, activations and offload/LoRA terms, + the 12 runtime terms (fitplan.memory.runtime; DeepEP's)
    assert len(MEMORY_PARTS) == 25 and len(TIME_PARTS) == 13 and len(HOST_PARTS) == 6   # + the optimizer step
    assert parts.part_keys(parts.STATES) == MEMORY_PARTS[:4]


def test_each_part_has_its_own_label_and_colour():
    assert len({p.label for p in parts.TABLE}) == len({p.color for p in parts.TABLE}) == len(parts.TABLE)
    assert all(p.color.startswith("#") and len(p.color) == 7 for p in parts.TABLE)
    assert {p.group for p in parts.TABLE} == {parts.STATES, parts.ACTIVATIONS, parts.RUNTIME, parts.RESERVE, parts.TIME,
                                              parts.HOST, parts.NVME}


def test_payload_is_json_and_names_every_part():
    payload = json.loads(json.dumps(parts.payload()))
    assert [p["key"] for p in payload] == [p.key for p in parts.TABLE]
    by_key = {p["key"]: p for p in payload}
    assert by_key["activations/moe_buffers"]["group"] == "activations"
    assert by_key["time/ep_exposed"] == {"key": "time/ep_exposed", "label": "exposed ep traffic",
                                         "color": parts.color("time/ep_exposed"), "group": "time"}
