"""`record`: a frozen dataclass whose __eq__, __hash__ and __repr__ are shared functions.

`dataclasses.dataclass(frozen=True)` writes six methods per class as source text and compiles
each one with exec (CPython 3.11 Lib/dataclasses.py, _create_fn): about 0.8 ms a class, and
a plan imports 73 of them, 61 ms of every command before any work. Here the dataclass
machinery keeps what it must generate (__init__, and the frozen __setattr__ and __delattr__)
and the comparison, hash and repr are closures over the class's field names, built without
compiling anything: 38-41 ms for the same 73 (bench/results-2026-12-03.md, fourth session).
They behave as the generated ones do: equal when the classes are the same and the compared
fields are equal (else NotImplemented), the hash of the hashed fields' tuple, and
`Name(field=value, ...)` with the repr fields. A method the class defines itself is kept, as
dataclass keeps it.
"""
from dataclasses import dataclass, fields
from operator import attrgetter
from reprlib import recursive_repr


def record(cls=None, /, *, slots: bool = False, kw_only: bool = False):
    """As @dataclass(frozen=True, slots=..., kw_only=...), the same fields, init, replace() and
    FrozenInstanceError; see the module's docstring for what differs in how it is built."""
    def wrap(cls):
        own = cls.__dict__
        cls = dataclass(cls, frozen=True, eq=False, repr=False, slots=slots, kw_only=kw_only)
        every = fields(cls)
        values = _getter([f.name for f in every if f.compare])
        if "__eq__" not in own:
            def __eq__(self, other):
                if other.__class__ is self.__class__:
                    return values(self) == values(other)
                return NotImplemented
            cls.__eq__ = __eq__
        if "__hash__" not in own:
            hashed = _getter([f.name for f in every if (f.compare if f.hash is None else f.hash)])
            cls.__hash__ = lambda self: hash(hashed(self))
        if "__repr__" not in own:
            shown = [f.name for f in every if f.repr]

            @recursive_repr()
            def __repr__(self):
                return f"{self.__class__.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in shown)})"
            cls.__repr__ = __repr__
        return cls
    return wrap if cls is None else wrap(cls)


def _getter(names: list):
    """A function of an instance: the tuple of those fields' values (attrgetter, in C)."""
    if not names:
        return lambda self: ()
    get = attrgetter(*names)
    return get if len(names) > 1 else (lambda self: (get(self),))
