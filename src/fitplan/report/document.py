"""What each report says, as blocks (fitplan.report.render draws them as text or markdown).
One unit per column: GiB = 2**30 bytes. Each report lives in its own module; these are the
entry points the service and the CLI call.

  seed           the seed report (no configuration)              fitplan.report.seed
  breakdown      one configuration                              fitplan.report.configuration
  search         the search (--suggest)                         fitplan.report.suggestions
  compare        fitplan compare                                fitplan.report.comparison
  preset_list, preset_show   fitplan presets                    fitplan.report.preset_text
The header and the time-to-train lines they share: fitplan.report.header, fitplan.report.to_train.
The command line imports only the module of the report it prints (`document.search` loads
fitplan.report.suggestions alone), so a report's module is named here rather than imported.
"""
import importlib

_MODULES = {"seed": "seed", "breakdown": "configuration", "search": "suggestions", "compare": "comparison",
            "preset_list": "preset_text", "preset_show": "preset_text"}
__all__ = sorted(_MODULES)


def __getattr__(name: str):
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"fitplan.report.{_MODULES[name]}"), name)
