"""fitplan.report.plot: PNGs written with the Agg backend, checked by file size and by
decoding them (matplotlib.image.imread: height x width x RGBA at the figure's size x dpi)."""
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")
import matplotlib.image as mpimg  # noqa: E402

from fitplan.memory.breakdown import evaluate  # noqa: E402
from fitplan.report.plot import DPI, fitting_x, plot_breakdowns, plot_sweep  # noqa: E402
from fitplan.specs import ParallelConfig, Recompute, ZeroStage  # noqa: E402
from fitplan.units import GiB  # noqa: E402
from tests.conftest import make_setup  # noqa: E402

SETUP = make_setup("llama3.1-8b", 8, gpu="h100-80gb", global_batch=64)
CONFIGS = {
    "dp=8 ZeRO-1": ParallelConfig(dp=8, zero=ZeroStage.OS),
    "dp=8 ZeRO-3 full": ParallelConfig(dp=8, zero=ZeroStage.OS_G_P, recompute=Recompute.FULL),
    "tp=8 sp selective": ParallelConfig(tp=8, sequence_parallel=True, recompute=Recompute.SELECTIVE),
}


def decoded(path):
    assert path.stat().st_size > 10_000          # a drawn figure, not an empty canvas
    image = mpimg.imread(path)
    assert image.std() > 0.05                    # not one flat colour
    return image.shape


def test_breakdown_bars(tmp_path):
    breakdowns = [evaluate(SETUP, c) for c in CONFIGS.values()]
    path = plot_breakdowns(breakdowns, list(CONFIGS), tmp_path / "bars.png")
    # figure width max(7, 1.3 x 3 bars + 4.5) = 8.4 in, height 5.5 in, at 100 dpi
    assert decoded(path) == (550, 840, 4)
    assert DPI == 100


def test_breakdowns_over_the_line_still_draw(tmp_path):
    over = evaluate(SETUP, ParallelConfig(dp=8))        # DDP: 16 B/param x 8.03e9 = 120 GiB of states alone
    assert not over.fits and over.state_bytes > 80 * GiB
    assert decoded(plot_breakdowns([over], ["DDP"], tmp_path / "over.png")) == (550, 700, 4)   # min width 7 in


def test_sweep(tmp_path):
    # per-GPU bytes halving with the GPU count; capacity 75 GiB: 64 GiB at 16 GPUs is the smallest fit
    points = [(n, 1024 * GiB // n) for n in (1, 2, 4, 8, 16, 32, 64)] + [(128, None)]
    assert fitting_x(points, 75 * GiB) == 16
    path = plot_sweep(points, 75 * GiB, tmp_path / "sweep.png", "GPUs")
    assert decoded(path) == (500, 800, 4)


def test_sweep_over_sequence_length_marks_the_largest_fit(tmp_path):
    points = [(s, s * 10 * 2**20) for s in (2048, 4096, 8192, 16384)]   # 10 MiB per token
    assert fitting_x(points, 100 * GiB, mark="largest") == 8192           # 80 GiB fits, 160 GiB does not
    assert fitting_x(points, 1 * GiB) is None
    assert decoded(plot_sweep(points, 100 * GiB, tmp_path / "seq.png", "sequence length", mark="largest"))


def test_bad_input():
    with pytest.raises(ValueError, match="2 breakdowns but 1 labels"):
        plot_breakdowns([evaluate(SETUP, c) for c in list(CONFIGS.values())[:2]], ["a"], "x.png")
    with pytest.raises(ValueError, match="no points"):
        plot_sweep([], GiB, "x.png", "GPUs")
    with pytest.raises(ValueError, match="mark must be"):
        fitting_x([(1, 1)], 2, mark="middle")


def test_matplotlib_is_imported_only_when_drawing():
    code = "import sys, fitplan.report.plot, fitplan.memory.breakdown; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _drawn(monkeypatch):
    """What the last figure says: title, tick labels, legend entries (captured as it is saved)."""
    from fitplan.report import plot
    seen, save = {}, plot._save

    def capture(fig, plt, path):
        ax = fig.axes[0]
        seen.update(title=ax.get_title(), ticks=[t.get_text() for t in ax.get_xticklabels()],
                    legend=[t.get_text() for t in ax.get_legend().get_texts()])
        return save(fig, plt, path)
    monkeypatch.setattr(plot, "_save", capture)
    return seen


def test_bars_are_named_by_their_layout(tmp_path, monkeypatch):
    from fitplan.report.plot import bar_labels
    from fitplan.report.sentences import layout_words
    seen = _drawn(monkeypatch)
    breakdowns = [evaluate(SETUP, c) for c in CONFIGS.values()]
    plot_breakdowns(breakdowns, ["#1", "#2", "#3"], tmp_path / "bars.png")
    assert seen["ticks"] == ["#1\ndp8 zero1", "#2\ndp8 zero3 full", "#3\ntp8 sp selective"]
    assert bar_labels(breakdowns[:1], ["dp8 zero1"]) == ["dp8 zero1"]          # a label that is the layout: once
    assert layout_words(ParallelConfig(tp=8, pp=2, sequence_parallel=True, recompute=Recompute.SELECTIVE)) \
        == "tp8 pp2 sp selective"
    assert layout_words(ParallelConfig(dp=4, tp=2, pp=2, virtual_stages=2, zero=ZeroStage.OS, micro_batch=2)) \
        == "dp4 tp2 pp2 v2 zero1 mb2"
    assert layout_words(ParallelConfig()) == "one GPU"


def test_suggestion_plot_from_the_cli_names_layouts(tmp_path, monkeypatch):
    import io
    from fitplan.cli import main
    seen = _drawn(monkeypatch)
    assert main(["plan", "--preset", "gpt3-175b", "--gpus", "16", "--suggest", "--top", "2", "--plot",
                 str(tmp_path / "p.png")], out=io.StringIO(), err=io.StringIO()) == 0
    assert seen["ticks"][0] == "#1\ntp8 pp2 sp selective"


def test_sweep_names_model_and_gpu_and_the_usable_line(tmp_path, monkeypatch):
    import io
    from fitplan.cli import main
    from fitplan.report.plot import sweep_title
    seen = _drawn(monkeypatch)
    assert main(["sweep", "--preset", "gpt3-175b", "--gpus", "8", "--over", "gpus", "--values", "8,16,32",
                 "--plot", str(tmp_path / "s.png")], out=io.StringIO(), err=io.StringIO()) == 0
    assert seen["title"] == sweep_title("gpt3-175b", "gpu-192gib") \
        == "gpt3-175b on gpu-192gib GPUs: least per-GPU memory of any configuration"
    assert "usable memory (182.0 GiB)" in seen["legend"] and not any("capacity" in t for t in seen["legend"])
    assert main(["sweep", "--preset", "llama3.1-8b", "--gpus", "8", "--over", "seq-len", "--values", "4096,8192",
                 "--plot", str(tmp_path / "q.png")], out=io.StringIO(), err=io.StringIO()) == 0
    assert seen["title"].startswith("llama3.1-8b on 8 x h100-80gb: ")
