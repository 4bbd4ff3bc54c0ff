"""A Term is a number together with how it was computed: formula, inputs, source.

Formulas are plain functions over numbers (ints or NumPy arrays, see fitplan.arith). The
`formula` decorator attaches the text and citation. Assemblers take an evaluator `ev`:
`RAW` just calls the function (the vectorized search), a `Trace` also records a Term for
every call (the explanation of one configuration). One copy of each formula and of each
assembly serves both.
"""
from dataclasses import dataclass, field
from typing import Callable

from fitplan.record import record
from fitplan.sources import Cite

BYTES, COUNT, FLOPS, SECONDS, RATIO = "bytes", "count", "flops", "s", "ratio"


@record(slots=True, kw_only=True)
class Term:
    key: str                     # slash path, e.g. "states/weights"
    value: int | float
    unit: str
    formula: str = ""            # ASCII, paper symbols
    cite: Cite | None = None
    inputs: tuple[tuple[str, int | float], ...] = ()
    assumes: tuple[str, ...] = ()


@record(slots=True)
class Formula:
    fn: Callable
    key: str
    text: str | Callable[..., str]   # a function of the keyword inputs when the text depends on a mode
    cite: Cite
    unit: str
    assumes: tuple[str, ...] = ()

    def __call__(self, /, **kw):
        return self.fn(**kw)

    def term(self, /, *, key: str | None = None, **kw) -> Term:
        text = self.text(**kw) if callable(self.text) else self.text
        inputs = tuple((k, _plain(v)) for k, v in kw.items() if not callable(v))
        return Term(key=key or self.key, value=_plain(self.fn(**kw)), unit=self.unit,
                    formula=text, cite=self.cite, inputs=inputs, assumes=self.assumes)


def _plain(value):
    """Enums and NumPy scalars become plain Python values in a Term."""
    if hasattr(value, "item") and not isinstance(value, (int, float)):
        return value.item()
    if hasattr(value, "value") and not isinstance(value, (int, float, bool)):
        return value.value
    return value


def formula(key: str, text, cite: Cite, unit: str = BYTES, assumes: tuple[str, ...] = ()):
    def wrap(fn: Callable) -> Formula:
        return Formula(fn, key, text, cite, unit, tuple(assumes))
    return wrap


def RAW(f: Formula, /, *, key: str | None = None, **kw):
    """Evaluator for the search: compute, record nothing."""
    return f.fn(**kw)


class Memo:
    """Evaluator for the search's screens: RAW, each formula computed once per distinct set of
    inputs. The screens (recompute modes, offload tiers) share their box's
    arrays, so a term no mode changes (the embedding's and the logits' activations, the stage's
    parameters, a layer's backward) is computed for the first screen and reused by the rest. Inputs that are not
    plain numbers or strings are told apart by identity: each is held here with the result, so an
    id is never reused while its entry lives, and formulas never change their inputs in place.
    `sweep` between screens keeps only the entries the last screen used, so the memo holds about
    one screen's terms, as RAW's caller does. The formula is told apart by identity too (held the same
    way): hashing a Formula hashed its fields, its Cite's among them, on every call."""
    __slots__ = ("_seen", "_used")
    _PLAIN = frozenset((int, float, bool, str, type(None)))

    def __init__(self):
        self._seen, self._used = {}, {}

    def __call__(self, f: Formula, /, *, key: str | None = None, **kw):
        plain = self._PLAIN
        k = (id(f), tuple(kw), tuple([(v, type(v)) if type(v) in plain else id(v) for v in kw.values()]))
        hit = self._used.get(k) or self._seen.get(k)
        if hit is None:
            hit = (f.fn(**kw), kw, f)   # kw and f held: their ids stay unique while the entry lives
        self._used[k] = hit
        return hit[0]

    def once(self, inputs: tuple, make):
        """make(), computed once per distinct `inputs` (told apart as a formula's are) while its entry lives: a
        part the screens share though no single formula holds it (the data-parallel collectives'
        costs, which no recompute mode changes, come out of arithmetic between formulas, so their inputs are new
        arrays in every screen and the formulas' own entries never match)."""
        plain = self._PLAIN
        k = ("once", tuple([(v, type(v)) if type(v) in plain else id(v) for v in inputs]))
        hit = self._used.get(k) or self._seen.get(k)
        if hit is None:
            hit = (make(), inputs)   # the inputs held: their ids stay unique while the entry lives
        self._used[k] = hit
        return hit[0]

    def sweep(self) -> None:
        """Forget the entries the calls since the last sweep did not use."""
        self._seen, self._used = self._used, {}


def once(ev, make, inputs):
    """make() through the search's Memo (Memo.once, keyed by inputs(), what make reads); RAW and a Trace compute
    it each time, a Trace recording its terms in their usual order."""
    return ev.once(inputs(), make) if isinstance(ev, Memo) else make()


def layout_inputs(part: str, owner, c, *more) -> tuple:
    """once's key for a part of a layout that no recompute mode changes: the part's name (Memo.once tells parts
    apart by their inputs alone), the setup or model it belongs to, what else it reads (`more`), and the layout's
    fields but its recompute mode (the search's screens share their box's arrays, so they key
    alike)."""
    from dataclasses import fields
    return (part, owner, *more, *(getattr(c, f.name) for f in fields(c) if f.name != "recompute"))


def untraced(ev):
    """ev without its record: a Trace's calls as RAW (values an explanation does not list, such as
    the aux values beside the memory parts); RAW and the search's Memo as they are."""
    return RAW if isinstance(ev, Trace) else ev


@dataclass
class Trace:
    """Evaluator for explanations: compute and keep a Term per call, in call order."""
    terms: list[Term] = field(default_factory=list)

    def __call__(self, f: Formula, /, *, key: str | None = None, **kw):
        term = f.term(key=key, **kw)
        self.terms.append(term)
        return term.value

    def get(self, key: str) -> Term:
        for term in self.terms:
            if term.key == key:
                return term
        raise KeyError(key)
