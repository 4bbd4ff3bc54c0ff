"""Presets by name, each built when first asked for.

A command names one model and one GPU of the ~60 presets; building and checking every one of them (each spec's
__post_init__ checks its ranges) was about 1% of a plan's CPU time. A Registry holds each preset's name and how
to build it; reading a name builds that preset once and keeps it, and listing them (`fitplan presets list`, the
web page) builds them all. tests/unit/test_presets.py builds every one and checks its name.
"""
from collections.abc import Mapping


class Registry(Mapping):
    """name -> preset, from name -> a function of no arguments that builds it."""

    def __init__(self, makers):
        self._makers, self._built = dict(makers), {}

    def __getitem__(self, name):
        if name not in self._built:
            self._built[name] = self._makers[name]()
        return self._built[name]

    def __contains__(self, name) -> bool:
        return name in self._makers

    def __iter__(self):
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)


def deferred(helper):
    """A preset helper whose first argument is the preset's name, made to return (name, the call to make) instead
    of the preset: its arguments are read where it is written, its work done when the preset is first asked for."""
    def wrapped(name, *args, **kwargs):
        return name, lambda: helper(name, *args, **kwargs)
    wrapped.__name__, wrapped.__doc__ = helper.__name__, helper.__doc__
    return wrapped
