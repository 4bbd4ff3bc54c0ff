"""End to end in a real headless browser: Debian's chromium driven by Playwright for Python.

Loads the page from a real server on an ephemeral port, picks gpt3-175b on 16 GPUs and checks
the verdict, the first suggestion (what `fitplan plan --preset gpt3-175b --gpus 16 --suggest
--json` recommends) and that the memory charts rendered; exports one suggestion; switches to
8 GPUs and checks the proof and the smallest GPU count; then a bad input shows the CLI's line
next to its field. Screenshots go to $FITPLAN_SCREENSHOTS (default: pytest's tmp_path).

Needs /usr/bin/chromium (apt-get install chromium) and Playwright for Python (pip install
playwright); Playwright's own browser download is never used."""
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from fitplan.cli import main

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine: the browser test needs "
                                                         "Debian's chromium (apt-get install -y chromium)")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-quic", "--disable-dev-shm-usage"]
TIMEOUT_MS = 30_000


def export_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(["export", *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def cli_json(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, (json.loads(out.getvalue()) if code in (0, 1) else err.getvalue().rstrip("\n"))


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed "
                                                                 "(pip install -e '.[web]')")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def shots(tmp_path):
    d = Path(os.environ.get("FITPLAN_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def opened(browser, server, preset: str | None = None, gpus: int | None = None):
    """A fresh page on the server, settled; with a preset and GPU count chosen when given."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server.url)
    settle(page)
    if preset is not None:
        page.select_option("#preset", preset)
        page.fill("#gpus", str(gpus))
        settle(page)
    return page


def settle(page):
    """Wait until the answer for the latest input is drawn (the page clears body[data-busy])."""
    page.wait_for_selector("body[data-ready]:not([data-busy])", state="attached", timeout=TIMEOUT_MS)


def test_the_page_answers_like_the_cli(browser, server, shots):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    requests, problems = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" and not any(f"status of {c}" in m.text for c in (400, 503)) else None)
    # 400s: the bad input below; 503s: the server's "busy, try again shortly", which the page asks again
    # (test_a_busy_server_is_asked_again), Chromium logging each refusal; one it gave up on shows in #error
    page.goto(server.url)
    settle(page)

    # gpt3-175b on 16 GPUs
    page.select_option("#preset", "gpt3-175b")
    page.fill("#gpus", "16")
    settle(page)
    code, plan = cli_json("plan", "--preset", "gpt3-175b", "--gpus", "16", "--suggest", "--json")
    assert code == 0 and plan["feasible"]
    assert page.inner_text("#verdict").startswith("Fits, tight")      # every layout on 16 GPUs is tight: amber
    assert "tight" in page.get_attribute("#verdict", "class")
    assert "gpt3-175b on 16 × gpu-192gib" in page.inner_text("#verdict-detail")
    mv, rec = plan["minimum_viable"], plan["recommended"]
    first = page.locator('#table-disturbance tbody tr').first
    seen = {k: first.get_attribute(f"data-{k}") for k in ("tp", "pp", "dp", "sp", "recompute")}
    assert seen == {"tp": "8", "pp": "2", "dp": "1", "sp": "true", "recompute": "selective"}
    assert seen == {"tp": str(mv["tp"]), "pp": str(mv["pp"]), "dp": str(mv["dp"]),
                    "sp": str(mv["sequence_parallel"]).lower(), "recompute": mv["recompute"]}
    # the verdict names the recommendation (the fastest that fits with margin, else the fastest that fits): on
    # 16 GPUs every layout is tight (above 80% of the 192 GiB), so the fastest, said with the reason; beside it
    # the minimum viable layout with its peak, risk and phase; all at the fixed global batch the header's
    # assumptions name
    assert rec["risk"]["level"] == "tight"
    # the badge's band: the peak and its band (risk.band_bytes) against usable memory
    lo, hi = rec["risk"]["band_bytes"]
    gib = lambda x: f"{x / 2**30:,.2f}"   # noqa: E731
    assert page.inner_text("#verdict-band") == (f"peak {gib(rec['per_gpu_bytes'])} GiB ({gib(lo)}–{gib(hi)} GiB of "
                                                f"{gib(plan['usable_bytes_per_gpu'])} usable)")
    assert f"tp {rec['tp']} · pp {rec['pp']}" in page.inner_text("#recommended")
    assert "80%" in page.inner_text("#recommend-note") and "tight" in page.inner_text("#recommend-note")
    assert "tp 8 · pp 2" in page.inner_text("#minimum-viable")
    # every step time carries its 80% band (time.uncertainty), in the verdict and in the table
    u = rec["time"]["uncertainty"]
    assert f"({u['low_s']:,.1f}–{u['high_s']:,.1f} s, 80% band)" in page.inner_text("#verdict-detail")
    u = mv["time"]["uncertainty"]
    assert page.locator('#table-disturbance thead th').nth(13).inner_text() == "step s (80% band)"
    assert first.locator("td").nth(13).inner_text() == (f"{mv['time']['step_s']:,.3f} "
                                                        f"({u['low_s']:,.1f}–{u['high_s']:,.1f})")
    assert f"risk {mv['risk']['level']}" in page.inner_text("#verdict-detail") and mv["risk"]["level"] == "tight"
    # the timeline: one column per event of the recommended layout's busiest GPU, the peak marked
    events = page.locator("#timeline-chart svg g.tl-event")
    assert events.count() == len(rec["timeline"])
    assert page.text_content("#timeline-peak") == f"peak {rec['peak']['bytes'] / 2**30:,.2f} GiB"
    assert page.locator("#timeline-chart .margin-line").count() == 1
    assert rec["peak"]["phase"] in page.inner_text("#timeline-note")
    assert "global batch 1536" in page.inner_text("#assumed")
    assert page.locator("#table-disturbance tbody tr").count() == len(plan["suggestions"])
    assert page.locator("#table-throughput tbody tr").count() >= 1
    # the memory chart: one stacked bar per distinct suggestion, each with segments, and the usable line
    bars = page.locator("#memory-chart svg g.bar")
    assert bars.count() >= len(plan["suggestions"])
    assert page.locator("#memory-chart svg g.bar").first.locator("rect.bar-seg").count() >= 4
    assert page.is_hidden("#error"), page.inner_text("#error")   # an error leaves the last update's chart drawn
    assert int(bars.first.get_attribute("data-total")) == mv["per_gpu_bytes"]
    assert page.locator("#memory-chart .usable-line").count() == 1
    assert page.locator("#sweep-chart svg circle.sweep-point").count() >= 10
    assert page.locator("#sweep-chart .capacity-line").count() == 1
    # serving memory for the same model: fitplan infer's numbers (tp 8 by default, batch 1)
    code, served = cli_json("infer", "--preset", "gpt3-175b", "--gpus", "8", "--tp", "8", "--batch", "1", "--json")
    serving = page.inner_text("#serving")
    assert f"largest batch {served['max_batch']:,}" in serving and "decode step >=" in serving
    page.screenshot(path=str(shots / "fitplan-serve-16-gpus.png"), full_page=True)

    # the chart's labels say in words where each bar ranks
    sub = page.locator("#memory-chart svg g.bar").first.locator(".bar-sublabel").text_content()
    assert "least disturbance #1" in sub and "D#" not in sub and "T#" not in sub

    # export the first suggestion for Megatron-LM
    first.locator('button[data-format="megatron"]').click()
    page.wait_for_selector("#export-text:has-text('--tensor-model-parallel')", timeout=TIMEOUT_MS)   # (no eval: CSP)
    assert "--tensor-model-parallel-size 8" in page.inner_text("#export-text")
    # the recommended layout has its own export buttons, and exports the layout `fitplan export` writes
    page.locator('#export-recommended button[data-format="megatron"]').click()
    page.wait_for_selector(f"#export-text:has-text('--tensor-model-parallel-size {rec['tp']}')", timeout=TIMEOUT_MS)
    code, out, _ = export_cli("--preset", "gpt3-175b", "--gpus", "16", "--format", "megatron")
    assert code == 0 and f"--pipeline-model-parallel-size {rec['pp']}" in out
    exported = page.inner_text("#export-text")
    assert f"--pipeline-model-parallel-size {rec['pp']}" in exported
    assert [line for line in exported.splitlines() if line.strip().startswith("--")] == \
        [line for line in out.splitlines() if line.strip().startswith("--")]
    assert page.locator('#export-minimum-viable button[data-format="deepspeed"]').count() == 1

    # the serving panel answers once a sequence length is set in the training form (it sends serving's
    # own fields only, not the training form's seq_len)
    page.fill("#seq_len", "4096")
    settle(page)
    serving = page.inner_text("#serving")
    assert "unknown field" not in serving and f"largest batch {served['max_batch']:,}" in serving
    page.fill("#seq_len", "")
    settle(page)

    # the whole analysis as markdown: the CLI's --format markdown text
    with page.expect_download(timeout=TIMEOUT_MS) as got:
        page.click("#download-md")
    out = io.StringIO()
    main(["plan", "--preset", "gpt3-175b", "--gpus", "16", "--suggest", "--rank", "disturbance", "--format", "markdown"],
         out=out, err=io.StringIO())
    assert Path(got.value.path()).read_text() == out.getvalue()
    assert got.value.suggested_filename == "fitplan-gpt3-175b-16gpus.md"

    # 8 GPUs: nothing fits, the proof and the smallest count appear
    page.fill("#gpus", "8")
    settle(page)
    code, plan8 = cli_json("plan", "--preset", "gpt3-175b", "--gpus", "8", "--suggest", "--json")
    assert code == 1 and not plan8["feasible"]
    assert page.inner_text("#verdict") == "Does not fit"
    assert page.is_visible("#proof")
    assert page.inner_text("#proof-inequality") == plan8["lower_bound"]["inequality"]
    assert page.inner_text("#smallest-gpus") == str(plan8["lower_bound"]["smallest_fitting_gpus"]) == "16"
    assert page.locator("#table-disturbance tbody tr").count() == 0
    page.screenshot(path=str(shots / "fitplan-serve-8-gpus.png"), full_page=True)

    # a bad input: the CLI's own line, next to the field
    page.fill("#gpus", "0")
    settle(page)
    code, line = cli_json("plan", "--preset", "gpt3-175b", "--gpus", "0", "--suggest", "--json")
    assert code == 2
    assert page.inner_text("#error") == line
    assert "invalid" in (page.get_attribute("#gpus", "class") or "")
    assert page.locator(".field-error").inner_text() == line
    page.screenshot(path=str(shots / "fitplan-serve-error.png"), full_page=False)

    # back to a good input: the error goes away
    page.fill("#gpus", "16")
    settle(page)
    assert page.is_hidden("#error") and page.inner_text("#verdict").startswith("Fits")

    assert problems == []
    assert requests and all(u.startswith(server.url) for u in requests), \
        [u for u in requests if not u.startswith(server.url)]
    page.close()


def test_a_pasted_and_an_uploaded_hf_config(browser, server, shots):
    root = Path(__file__).resolve().parents[2]
    config = root / "examples" / "hf" / "llama-3.1-8b" / "config.json"
    page = opened(browser, server)
    page.locator(".segmented label", has_text="HF config.json").click()   # the label, as a user does
    page.fill("#hf-name", "llama-3.1-8b")
    page.fill("#hf-config", config.read_text())
    page.fill("#gpus", "8")
    settle(page)
    code, line = cli_json("plan", "--hf-config", str(config.parent), "--gpus", "8", "--suggest", "--json")
    assert code == 2 and page.inner_text("#error") == line          # an HF config needs --seq-len
    assert "invalid" in (page.get_attribute("#seq_len", "class") or "")
    page.fill("#seq_len", "8192")
    settle(page)
    code, plan = cli_json("plan", "--hf-config", str(config.parent), "--gpus", "8", "--seq-len", "8192",
                          "--suggest", "--json")
    assert page.inner_text("#verdict").startswith("Fits" if plan["feasible"] else "Does not fit")
    assert "llama-3.1-8b on 8 × h100-80gb" in page.inner_text("#verdict-detail")
    assert page.locator("#table-disturbance tbody tr").count() == len(plan["suggestions"])
    assert "--hf-config llama-3.1-8b/config.json" in page.inner_text("#cli-command")

    page.fill("#hf-config", '{"model_type": "llama"')     # cut short: the CLI's line for that file
    settle(page)
    assert page.inner_text("#error").startswith("fitplan: llama-3.1-8b/config.json: not valid JSON")

    page.set_input_files("#hf-file", str(root / "examples" / "hf" / "mistral-7b" / "config.json"))
    settle(page)
    assert page.is_hidden("#error")
    assert page.input_value("#hf-config") == (root / "examples" / "hf" / "mistral-7b" / "config.json").read_text()
    assert "hf-model on 8 ×" in page.inner_text("#verdict-detail")
    page.screenshot(path=str(shots / "fitplan-serve-hf.png"), full_page=False)
    page.close()


def test_a_busy_server_is_asked_again(browser, server):
    """A 503 with Retry-After is the server saying "busy, try again shortly" (fitplan.web.limits: too many
    connections from this address, a full queue), and the page does. On a loaded machine the real cap of 8
    refused some of an update's requests while the previous update's cancelled ones still held connections;
    the page showed "server busy: 8 connections open from this address" and kept the last update's chart.
    Here the first three searches the page sends are answered with the server's refusal (Playwright's
    route, so the test does not depend on the machine's load): the answer drawn is still the CLI's, and no
    error is shown."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(server.url)
    settle(page)
    refused = []

    def busy_first(route):
        if len(refused) < 3:
            refused.append(route.request.url)
            route.fulfill(status=503, headers={"Retry-After": "1", "Content-Type": "application/json"},
                          body=json.dumps({"error": "server busy: 8 connections open from this address; try again "
                                                    "shortly"}))
        else:
            route.continue_()
    page.route("**/api/plan", busy_first)
    page.select_option("#preset", "gpt3-175b")
    page.fill("#gpus", "16")
    settle(page)
    code, plan = cli_json("plan", "--preset", "gpt3-175b", "--gpus", "16", "--suggest", "--json")
    assert code == 0 and len(refused) == 3
    assert page.is_hidden("#error"), page.inner_text("#error")
    assert "gpt3-175b on 16" in page.inner_text("#verdict-detail")
    first = page.locator("#memory-chart svg g.bar").first
    assert int(first.get_attribute("data-total")) == plan["minimum_viable"]["per_gpu_bytes"]
    page.close()


def test_a_moe_bar_draws_every_term(browser, server):
    """The page's terms are the server's table of parts (GET /api/presets -> parts): a Mixtral bar
    has its MoE all-to-all buffers segment, and the step-time legend names every time part."""
    from fitplan import parts
    page = opened(browser, server, "mixtral-8x7b", 16)
    code, plan = cli_json("plan", "--preset", "mixtral-8x7b", "--gpus", "16", "--suggest", "--json")
    assert code == 0 and plan["feasible"]
    first = page.locator("#memory-chart svg g.bar").first
    terms = [first.locator("rect.bar-seg").nth(i).get_attribute("data-term")
             for i in range(first.locator("rect.bar-seg").count())]
    assert "activations/moe_buffers" in terms
    # the bar is the recommended configuration's own breakdown, expert parallelism included: its
    # total is the suggestion's per_gpu_bytes (the page once dropped ep and drew 367 GiB for 73 GiB)
    assert int(float(first.get_attribute("data-total"))) == plan["minimum_viable"]["per_gpu_bytes"]
    assert max(s["ep"] for s in plan["suggestions"]) > 1   # the ep column below shows degrees above 1
    # the suggestion tables have an ep column, each row its suggestion's expert-parallel degree
    table = page.locator("#table-disturbance table")
    head = [table.locator("thead th").nth(i).inner_text() for i in range(table.locator("thead th").count())]
    assert head[:6] == ["#", "tp", "pp", "dp", "cp", "ep"]
    rows = table.locator("tbody tr")
    assert [rows.nth(i).get_attribute("data-ep") for i in range(rows.count())] \
        == [str(s["ep"]) for s in plan["suggestions"]]
    assert rows.first.locator("td").nth(5).inner_text() == str(plan["minimum_viable"]["ep"])
    legend = page.inner_text("#memory-chart .legend")
    assert parts.label("activations/moe_buffers") in legend and parts.label("reserve") in legend
    page.wait_for_selector("#compare-table", timeout=TIMEOUT_MS)
    shares = page.inner_text("#compare .legend")
    assert all(parts.label(k) in shares for k in parts.part_keys(parts.TIME))
    page.close()


def test_all_settings_are_generated_from_the_declarations(browser, server):
    """The 'All settings' section is built from GET /api/fields: one input per model, training
    and cluster field the hand-made form lacks; a value set there reaches the API and the
    CLI line, and the answer is the CLI's for the same flag."""
    from fitplan.web.schema import fields_payload
    page = opened(browser, server)
    hand_made = {"preset", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp", "seq_len", "precision",
                 "gpu", "gpus", "gpus_per_node"}
    expected = [f["key"] for f in fields_payload()["plan"]
                if f["root"] in ("model", "training", "cluster") and f["key"] not in hand_made]
    assert page.locator("#more-fields [id^='f-']").count() == len(expected) >= 30
    page.click("#more summary")
    page.select_option("#preset", "llama3.1-8b")
    page.fill("#gpus", "16")
    page.select_option("#f-attention_kernel", "flash")
    page.select_option("#f-dropout", "false")
    settle(page)
    line = page.inner_text("#cli-command")
    assert "--attention-kernel flash" in line and "--no-dropout" in line
    code, plan = cli_json("plan", "--preset", "llama3.1-8b", "--gpus", "16", "--attention-kernel", "flash",
                          "--no-dropout", "--suggest", "--json")
    mv = plan["minimum_viable"]
    first = page.locator('#table-disturbance tbody tr').first
    assert (first.get_attribute("data-tp"), first.get_attribute("data-recompute")) == (str(mv["tp"]),
                                                                                       mv["recompute"])
    page.close()
