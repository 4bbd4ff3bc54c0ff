"""What each report says, as blocks (fitplan.report.render draws them as text or markdown).
One unit per column: GiB = 2**30 bytes. Each report lives in its own module; these are the
entry points the service and the CLI call.

  seed           the seed report (no configuration)              fitplan.report.seed
  breakdown      one configuration                              fitplan.report.configuration
  search         the search (--suggest)                         fitplan.report.suggestions
  compare        fitplan compare                                fitplan.report.comparison
  preset_list, preset_show   fitplan presets                    fitplan.report.preset_text
The header and the time-to-train lines they share: fitplan.report.header, fitplan.report.to_train.
"""
from fitplan.report.comparison import compare
from fitplan.report.configuration import breakdown
from fitplan.report.preset_text import preset_list, preset_show
from fitplan.report.seed import seed
from fitplan.report.suggestions import search

__all__ = ["breakdown", "compare", "preset_list", "preset_show", "search", "seed"]
