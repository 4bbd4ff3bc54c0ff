"""fitplan.record.record against dataclasses.dataclass(frozen=True): the same class behaviour, built without
compiling __eq__, __hash__ and __repr__ (issue 26: class creation was 60-70 ms of every command)."""
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
    assert [f.name for f in dataclasses.fields(R)] == [f.name for f in dataclasses.fields(D)]
    assert hasattr(R, "__slots__") == options.get("slots", False)
    if options.get("kw_only"):
        with pytest.raises(TypeError):
            R(1)


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
