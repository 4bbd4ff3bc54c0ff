"""`record`: a frozen dataclass built with one compiled method instead of six.

`dataclasses.dataclass(frozen=True)` writes six methods per class as source text and compiles
each one with exec (CPython 3.11 Lib/dataclasses.py, _create_fn), and a plan imports 72 such
classes. Here dataclass collects the fields (field(), defaults, kw_only, slots, replace() and
fields() as it does them) and generates nothing; record compiles only `__init__`, whose speed
every instance pays (and only once the class has been made BOUND_CALLS times: until then its arguments are bound
by name), and builds the rest as closures over the field names:
`__setattr__`/`__delattr__` raise FrozenInstanceError, `__eq__` compares the classes and the
compared fields (else NotImplemented), `__hash__` hashes the hashed fields' tuple, `__repr__` is
`Name(field=value, ...)` over the repr fields, and a slotted record pickles its fields' values
as dataclass's frozen slotted classes do. Building the 72 classes a plan imports: 59-61 ms as
dataclasses compiling three methods each, 23-29 ms compiling one (three runs each, the same
harness: bench/results-2026-12-03.md, the 2026-12-04 section). A method the class defines itself is
kept, as dataclass keeps it. What differs: a record's generated __doc__ is dataclass's less the
annotations, and its __dataclass_params__ says frozen=False (record, not dataclass, freezes it).
"""
from dataclasses import MISSING, FrozenInstanceError, dataclass, fields
from operator import attrgetter
from reprlib import recursive_repr


def record(cls=None, /, *, slots: bool = False, kw_only: bool = False):
    """As @dataclass(frozen=True, slots=..., kw_only=...), the same fields, init, replace() and
    FrozenInstanceError; see the module's docstring for what differs in how it is built."""
    def wrap(cls):
        own = dict(cls.__dict__)
        doc = cls.__doc__
        cls.__doc__ = doc or "-"   # dataclass would take a signature of the __init__ it has not got yet
        cls = dataclass(cls, init=False, eq=False, repr=False, slots=slots, kw_only=kw_only)
        every = fields(cls)
        cls.__doc__ = doc
        if "__init__" not in own:
            cls.__init__, signature = _init(cls, every)
            if not doc:
                cls.__doc__ = cls.__name__ + signature
        names = frozenset(f.name for f in every)

        def __setattr__(self, name, value):
            if type(self) is cls or name in names:
                raise FrozenInstanceError(f"cannot assign to field {name!r}")
            super(cls, self).__setattr__(name, value)

        def __delattr__(self, name):
            if type(self) is cls or name in names:
                raise FrozenInstanceError(f"cannot delete field {name!r}")
            super(cls, self).__delattr__(name)
        cls.__setattr__, cls.__delattr__ = __setattr__, __delattr__
        if slots and "__getstate__" not in own:   # pickling sets slots without the frozen __setattr__
            state = _getter([f.name for f in every])

            def __setstate__(self, values):
                for f, v in zip(every, values):
                    object.__setattr__(self, f.name, v)
            cls.__getstate__, cls.__setstate__ = (lambda self: state(self)), __setstate__
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


# Calls a class's __init__ answers by binding its arguments by name before compiling the real one: compiling costs
# about 70 us, a bound call a few us more than a compiled one, and a command makes most of its classes a few times.
BOUND_CALLS = 8


def _init(cls, every) -> tuple:
    """The class's __init__ and its signature's text. As dataclass writes it: the init fields
    positional, then keyword-only ones, each default a default or a factory's sentinel; fields
    outside init take their default or factory; each is set past the frozen __setattr__;
    __post_init__ runs last. It is compiled when the class is made for the BOUND_CALLS + 1-th time
    (the one method whose speed matters runs per instance; a command instantiates about three in four of
    the classes it imports, most a few times, and compiling each costs about 0.1 ms): until then a stand-in
    binds the arguments to the fields itself (_bind, the same values and the same errors' kinds), then
    compiles the real one, puts it on the class and passes the call on (inspect.signature of a class
    not yet compiled shows the stand-in's (*args, **kwargs); the class's __doc__ has the real
    signature from the start)."""
    scope = {"_set": object.__setattr__, "_FACTORY": _FACTORY}
    params, keyword, lines, shown = [], [], [], [[], []]
    for i, f in enumerate(every):
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if f.default_factory is not MISSING:
            scope[f"_f{i}"] = f.default_factory
            value = (f"_f{i}() if {f.name} is _FACTORY else {f.name}" if f.init else f"_f{i}()")
            default = "_FACTORY"
        else:
            scope[f"_d{i}"] = f.default
            value = f.name if f.init else f"_d{i}"
            default = f"_d{i}"
        if f.init:
            param = f.name + (f"={default}" if has_default else "")
            (keyword if f.kw_only else params).append(param)
            text = f.name + ("" if not has_default else "=<factory>" if default == "_FACTORY" else f"={f.default!r}")
            shown[f.kw_only].append(text)
        elif not has_default:
            continue
        lines.append(f"  _set(self, {f.name!r}, {value})")
    post_init = hasattr(cls, "__post_init__")
    if post_init:
        lines.append("  self.__post_init__()")
    signature = ", ".join(["self", *params, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({signature}):\n" + ("\n".join(lines) or "  pass")
    name = f"{cls.__qualname__}.__init__"
    positional = [f.name for f in every if f.init and not f.kw_only]
    calls = [0]

    def __init__(self, *args, **kwargs):
        if "__init__" not in scope:
            calls[0] += 1
            if calls[0] <= BOUND_CALLS:
                _bind(self, every, positional, name, args, kwargs)
                if post_init:
                    self.__post_init__()
                return
            exec(source, scope)
            scope["__init__"].__qualname__ = name
            cls.__init__ = scope["__init__"]
        scope["__init__"](self, *args, **kwargs)
    __init__.__qualname__ = name
    return __init__, f"({', '.join([*shown[0], *(['*', *shown[1]] if shown[1] else [])])})"


def _bind(self, every, positional: list, name: str, args: tuple, kwargs: dict) -> None:
    """What the compiled __init__ does before __post_init__, without compiling it: each field set, in order, to
    its argument (by position among the positional init fields, else by name) or its default or factory's value;
    a TypeError where Python's own binding raises one (too many, unknown, repeated or missing arguments)."""
    if len(args) > len(positional):
        raise TypeError(f"{name}() takes {len(positional) + 1} positional arguments but {len(args) + 1} were given")
    given = dict(zip(positional, args))
    for key, value in kwargs.items():
        if key in given:
            raise TypeError(f"{name}() got multiple values for argument {key!r}")
        given[key] = value
    for f in every:
        if f.init and f.name in given:
            value = given.pop(f.name)
            if value is _FACTORY and f.default_factory is not MISSING:
                value = f.default_factory()
        elif f.default_factory is not MISSING:
            value = f.default_factory()
        elif f.default is not MISSING:
            value = f.default
        elif f.init:
            raise TypeError(f"{name}() missing 1 required argument: {f.name!r}")
        else:
            continue
        object.__setattr__(self, f.name, value)
    if given:
        raise TypeError(f"{name}() got an unexpected keyword argument {next(iter(given))!r}")


_FACTORY = type("_Factory", (), {"__repr__": lambda self: "<factory>"})()


def _getter(names: list):
    """A function of an instance: the tuple of those fields' values (attrgetter, in C)."""
    if not names:
        return lambda self: ()
    get = attrgetter(*names)
    return get if len(names) > 1 else (lambda self: (get(self),))
