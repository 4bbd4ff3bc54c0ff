"""fitplan.presets.registry: the model and GPU presets are built when first asked for, each once, under the name
they are listed by; listing them builds them all (fitplan presets list, the web page)."""
from fitplan import presets
from fitplan.presets.registry import Registry, deferred


def test_every_preset_is_listed_under_its_own_name():
    # 39 models and 23 GPUs at this writing; a preset whose name differs from its key could never be found
    assert len(presets.MODELS) >= 39 and len(presets.GPUS) >= 23
    assert all(name == p.model.name for name, p in presets.MODELS.items())
    assert all(name == g.name for name, g in presets.GPUS.items())
    # each is built once and kept: asked again, the same object
    assert presets.model("deepseek-v3") is presets.MODELS["deepseek-v3"]
    assert presets.by_name("deepseek-v3")[0] is presets.MODELS["deepseek-v3"].model
    assert presets.gpu("h100-80gb") is presets.GPUS["h100-80gb"]
    # the GPUs are built with their host link, generation and TDP (fitplan.presets.gpus._finished)
    h100 = presets.GPUS["h100-80gb"]
    assert (h100.host_bytes_per_s, h100.architecture, h100.tdp_watts) == (50e9, "hopper", 700)


def test_a_registry_builds_what_is_asked_for_and_nothing_else():
    built = []

    @deferred
    def make(name, size):
        """a preset"""
        built.append(name)
        return (name, size)
    reg = Registry([make("a", 1), make("b", 2)])
    assert make.__name__ == "make" and make.__doc__ == "a preset"
    assert len(reg) == 2 and list(reg) == ["a", "b"] and "a" in reg and "c" not in reg and built == []
    assert reg["b"] == ("b", 2) and reg["b"] is reg["b"] and built == ["b"]   # built once
    assert reg.get("c") is None and built == ["b"]
    assert dict(reg.items()) == {"a": ("a", 1), "b": ("b", 2)} and built == ["b", "a"]
