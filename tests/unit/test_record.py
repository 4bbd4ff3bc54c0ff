"""fitplan.record.record against dataclasses.dataclass(frozen=True): the same class behaviour, built with one
compiled method (__init__) instead of six (issue 26: class creation was 60-70 ms of every command)."""
import copy
import dataclasses
import pickle

import pytest

from fitplan.record import record
from fitplan.specs import ParallelConfig
from fitplan.specs.parallel import Recompute


def _pair(**options):
    """The same class body, once as a frozen dataclass and once as a record."""
    def body():
        class Point:
            """a point"""
            x: int
            y: float = 0.5
            label: str = dataclasses.field(default="p", compare=False)
            tags: tuple = dataclasses.field(default_factory=tuple, repr=False)
            weight: int = dataclasses.field(default=1, hash=False)
            kind: str = dataclasses.field(default="k", init=False)   # set from its default, not a parameter

            def __post_init__(self):
                if self.x < 0:
                    raise ValueError("x must be >= 0")

            def norm(self):
                return abs(self.x) + abs(self.y)
        return Point
    return dataclasses.dataclass(frozen=True, **options)(body()), record(**options)(body())


@pytest.mark.parametrize("options", [{}, {"slots": True}, {"kw_only": True}, {"slots": True, "kw_only": True}])
def test_a_record_behaves_as_the_frozen_dataclass(options):
    D, R = _pair(**options)
    for args in ({"x": 3}, {"x": 3, "y": 1.25, "label": "q", "tags": (1, 2), "weight": 7}):
        d, r = D(**args), R(**args)
        assert repr(r) == repr(d)   # the repr fields in order; tags has repr=False
        assert hash(r) == hash(d)   # the hash of the hashed fields' tuple (label: compare=False; weight: hash=False)
        assert r == R(**args) and d == D(**args)
        assert r.norm() == d.norm()
        assert dataclasses.asdict(r) == dataclasses.asdict(d)
        assert dataclasses.replace(r, x=4) == R(**{**args, "x": 4})
    a = R(x=1, label="a")
    assert a == R(x=1, label="b")            # label does not compare, as in the dataclass
    assert a != R(x=1, weight=2)             # weight compares, though it does not hash
    assert a.__eq__(D(x=1)) is NotImplemented   # another class: not equal, as dataclass's __eq__ says
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.x = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del a.x
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.other = 2                          # not a field either: the instance is frozen whole, as in the dataclass
    assert [f.name for f in dataclasses.fields(R)] == [f.name for f in dataclasses.fields(D)]
    assert hasattr(R, "__slots__") == options.get("slots", False)
    assert R(x=1).kind == D(x=1).kind == "k"
    with pytest.raises(TypeError):
        R(x=1, kind="j")                     # init=False: no such parameter
    with pytest.raises(ValueError):
        R(x=-1)                              # __post_init__ runs
    b = R(x=2, tags=(3,), label="b")
    for again in (copy.deepcopy(b), copy.copy(b)):   # pickle's protocol (__reduce_ex__); a local class has no import path
        assert again == b and again.label == "b" and again.tags == (3,)
    if options.get("kw_only"):
        with pytest.raises(TypeError):
            R(1)
    assert R.__doc__ == "a point"


def test_a_record_without_a_docstring_is_named_by_its_signature():
    @record(kw_only=True)
    class Plain:
        n: int
        t: tuple = dataclasses.field(default_factory=tuple)
        s: str = "a"
    assert Plain.__doc__ == "Plain(*, n, t=<factory>, s='a')"   # dataclass's text, less the annotations
    assert Plain(n=1).t == () and Plain(n=1).t is not Plain(n=2, t=(1,)).t


def test_a_method_the_class_defines_is_kept():
    @record
    class Named:
        name: str

        def __repr__(self):
            return f"<{self.name}>"

        def __hash__(self):
            return 7
    assert repr(Named("n")) == "<n>" and hash(Named("n")) == 7


def test_a_recursive_repr_does_not_recurse_forever():
    @record
    class Box:
        items: list
    box = Box([])
    box.items.append(box)
    assert repr(box).endswith(".Box(items=[...])")   # reprlib.recursive_repr, as dataclass's repr (qualname)


def test_the_specs_compare_and_hash_by_value():
    """ParallelConfig is a record: equal layouts are one dict key (the report memoises per configuration)."""
    a = ParallelConfig(tp=2, pp=4, dp=8, recompute=Recompute.SELECTIVE)
    b = ParallelConfig(tp=2, pp=4, dp=8, recompute=Recompute.SELECTIVE)
    assert a == b and hash(a) == hash(b) and len({a: 1, b: 2}) == 1
    assert a != dataclasses.replace(a, tp=4)
    assert pickle.loads(pickle.dumps(a)) == a   # the web pool's workers send results pickled


def test_a_record_with_its_own_init_keeps_it_and_its_docstring():
    @record
    class Own:
        n: int

        def __init__(self, text: str):
            object.__setattr__(self, "n", len(text))
    assert Own("abc").n == 3 and Own("abc") == Own("xyz")
    assert Own.__doc__ is None or Own.__doc__.startswith("Own(")   # dataclass names it by the signature; never a placeholder


def test_init_binds_its_arguments_then_is_compiled():
    """The stand-in __init__ binds the arguments itself for the first BOUND_CALLS instances (compiling the real
    one costs more than a few bound calls, and a command makes most of its classes a few times), then compiles the
    real one and puts it on the class; bound or compiled, the same arguments build the same instance and the same
    mistakes raise TypeError, as dataclass's __init__ does."""
    from fitplan.record import BOUND_CALLS

    @record(slots=True)
    class Pair:
        a: int
        b: int = 2
        tags: tuple = dataclasses.field(default_factory=tuple)
        c: int = dataclasses.field(default=5, kw_only=True)
        d: int = dataclasses.field(default=7, init=False)
    stand_in = Pair.__init__

    def built():
        return [Pair(1), Pair(1, 3), Pair(a=3, b=4, c=6), Pair(1, tags=(9,))]

    def mistakes():
        for call in (lambda: Pair(), lambda: Pair(1, 2, (), 4), lambda: Pair(1, a=1), lambda: Pair(1, e=1),
                     lambda: Pair(1, d=1)):
            with pytest.raises(TypeError):
                call()
    bound = built()
    assert BOUND_CALLS >= len(bound) and Pair.__init__ is stand_in   # not compiled yet
    assert [(p.a, p.b, p.tags, p.c, p.d) for p in bound] == [(1, 2, (), 5, 7), (1, 3, (), 5, 7), (3, 4, (), 6, 7),
                                                             (1, 2, (9,), 5, 7)]
    mistakes()
    for _ in range(BOUND_CALLS):
        Pair(0)
    assert Pair.__init__ is not stand_in and Pair.__init__.__qualname__.endswith("Pair.__init__")
    assert built() == bound
    mistakes()

    @record
    class Base:
        n: int

        def __post_init__(self):
            if self.n < 0:
                raise ValueError("n")

    class Child(Base):   # a subclass made first: bound, then the compiled __init__ lands on Base
        pass
    base_stand_in = Base.__init__
    for _ in range(BOUND_CALLS + 1):
        assert Child(5).n == 5 and Base(6).n == 6
        with pytest.raises(ValueError):
            Child(-1)   # __post_init__ runs, bound or compiled
    assert Base.__dict__["__init__"] is not base_stand_in and Base.__init__.__qualname__.endswith("Base.__init__")
