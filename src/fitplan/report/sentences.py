"""Sentences built from the core's structured results, shared by the text, markdown and
JSON reports (the JSON keeps the texts that explain, such as the lower bound's inequality).
No formula lives here: each sentence words numbers the core computed."""
from fitplan.units import fmt_gib


def inequality(bound) -> str:
    """The lower bound of fitplan.memory.bound with its numbers, e.g. 'busiest GPU >=
    (B*psi + e*s*b*h*L)/N = (16*175,000,000,000 + 2*2048*1*12288*96)/8 B = 326.53 GiB > usable
    182.00 GiB'."""
    x = dict(bound.inputs)
    relation = ">" if bound.excludes else "<="
    return (f"busiest GPU >= (B*psi + e*s*b*h*L)/N = ({x['B']}*{x['psi']:,} + {x['e']}*{x['s']}*{x['b_min']}*{x['h']}"
            f"*{x['L']})/{bound.num_gpus} B = {fmt_gib(bound.per_gpu_bytes)} GiB {relation} usable "
            f"{fmt_gib(bound.usable_bytes)} GiB")
