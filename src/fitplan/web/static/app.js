/* fitplan's page: read the form, ask the API (which runs the CLI), draw the answer.
   Every number shown comes from the API's JSON, which is the CLI's --json output. */
"use strict";
(function () {
  const $ = id => document.getElementById(id);
  const GiB = 2 ** 30;
  const DEBOUNCE_MS = 250;
  const DEFAULT_PRESET = "llama3.1-8b";
  const EXPORTS = [["megatron", "Megatron-LM", "megatron-args.sh"], ["deepspeed", "DeepSpeed", "ds_config.json"],
                   ["torchtitan", "torchtitan", "torchtitan_config.py"]];   // 0.3.x, the release `export` writes by default
  const FIELD_IDS = { preset: "preset", hf_config: "hf-config", hf_name: "hf-name", layers: "layers",
                      hidden: "hidden", heads: "heads", kv_heads: "kv_heads", ffn: "ffn", vocab: "vocab",
                      mlp: "mlp", seq_len: "seq_len", micro_batch: "micro_batch", global_batch: "global_batch",
                      precision: "precision", gpu: "gpu", gpus: "gpus", gpus_per_node: "gpus_per_node", top: "top" };

  const SPEC_FIELDS = { num_gpus: "gpus", gpus_per_node: "gpus_per_node", num_layers: "layers",
                       hidden_size: "hidden", num_heads: "heads", num_kv_heads: "kv_heads", ffn_hidden_size: "ffn",
                       vocab_size: "vocab", seq_len: "seq_len", global_batch: "global_batch",
                       micro_batch: "micro_batch" };
  let presets = null;
  let generation = 0;
  let controller = null;
  let timer = null;
  let current = null;      // {base, top, dist, thr}

  class ApiError extends Error {
    constructor(message, status) { super(message); this.status = status; }
  }

  // A 503 that carries Retry-After is the server saying "busy, try again shortly" (fitplan.web.limits: a
  // connection cap per address, a full queue). One update of this page opens more requests at once than the
  // per-address cap while the previous update's cancelled ones still run on the server, so it waits as told
  // and asks again, BUSY_RETRIES times at most, before it shows the server's line.
  const BUSY_RETRIES = 10;
  const pause = (ms, signal) => new Promise((resolve, reject) => {
    const aborted = () => { clearTimeout(t); reject(new DOMException("aborted", "AbortError")); };
    const t = setTimeout(() => { if (signal) signal.removeEventListener("abort", aborted); resolve(); }, ms);
    if (signal) {
      if (signal.aborted) aborted();
      else signal.addEventListener("abort", aborted, { once: true });
    }
  });

  async function request(path, init, signal) {
    for (let attempt = 0; ; attempt++) {
      let r;
      try {
        r = await fetch(path, { ...init, signal });
      } catch (e) {
        if (e.name === "AbortError") throw e;
        throw new ApiError("the fitplan server does not answer; is `fitplan serve` still running?", 0);
      }
      const after = Number(r.headers.get("Retry-After"));
      if (r.status !== 503 || !(after > 0) || attempt === BUSY_RETRIES) return r;
      await r.arrayBuffer().catch(() => null);   // the refusal's body, so its connection can be reused
      await pause(Math.min(after, 5) * 1000 * (1 + Math.random() / 4), signal);   // jitter: not all at once
    }
  }

  async function post(path, body, signal) {
    const r = await request(path, { method: "POST", headers: { "Content-Type": "application/json" },
                                    body: JSON.stringify(body) }, signal);
    const text = await r.text();
    let data = null;
    try { data = JSON.parse(text); } catch (e) { /* markdown, or a broken reply */ }
    if (!r.ok) throw new ApiError((data && data.error) || `HTTP ${r.status}`, r.status);
    return { data, text, exit: r.headers.get("X-Fitplan-Exit-Code") };
  }

  const fmt = (n, d = 2) => Number(n).toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
  const gib = b => fmt(b / GiB);
  const int = n => Number(n).toLocaleString("en-US");
  const stepSeconds = t => (t.step_s !== undefined ? t.step_s : t.step_time_s);
  // the step's 80% band (time.uncertainty: docs/calibration.md), "11.6–14.1", or "" where none stands behind it
  const band = t => (t && t.uncertainty ? `${fmt(t.uncertainty.low_s, 1)}–${fmt(t.uncertainty.high_s, 1)}` : "");
  const stepWithBand = t => fmt(stepSeconds(t), 3) + (band(t) ? ` (${band(t)})` : "");
  function node(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  // ------------------------------------------------------------------ the form

  function source() {
    return document.querySelector('input[name="source"]:checked').value;
  }

  function numberOf(id) {
    const v = $(id).value.trim();
    if (v === "") return undefined;
    const n = Number(v);
    return Number.isFinite(n) ? n : v;      // the server names a non-number
  }

  /** The request fields shared by every endpoint (no "top": sweep and export do not take it). */
  function collect() {
    const base = {};
    const mode = source();
    if (mode === "preset") {
      base.preset = $("preset").value;
    } else if (mode === "hf") {
      base.hf_config = $("hf-config").value;
      const name = $("hf-name").value.trim();
      if (name) base.hf_name = name;
    } else {
      for (const k of ["layers", "hidden", "heads", "kv_heads", "ffn", "vocab"]) {
        const v = numberOf(k);
        if (v !== undefined) base[k] = v;
      }
      base.mlp = $("mlp").value;
    }
    for (const k of ["seq_len", "micro_batch", "global_batch", "gpus", "gpus_per_node"]) {
      const v = numberOf(k);
      if (v !== undefined) base[k] = v;
    }
    if ($("precision").value) base.precision = $("precision").value;
    if ($("gpu").value) base.gpu = $("gpu").value;
    for (const f of moreFields) {
      const v = moreValue(f);
      if (v !== undefined) base[f.key] = v;
    }
    return base;
  }

  // ------------------------------------------------------------------ all settings, from GET /api/fields

  // The hand-made form above covers these; every other model, training and cluster field is
  // generated from its declaration (kind, choices, range, help, flag), as the CLI's flags are.
  const HAND_MADE = new Set(["preset", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp", "seq_len",
                             "precision", "gpu", "gpus", "gpus_per_node"]);
  const SPEC_ROOTS = new Set(["model", "training", "cluster"]);
  let moreFields = [];
  let inferKeys = new Set();   // the request keys serving takes (GET /api/fields infer)

  function moreInput(f) {
    const id = `f-${f.key}`;
    let input;
    if (f.kind === "bool" || f.choices) {
      const options = f.kind === "bool" ? [["", "default"], ["true", "on"], ["false", "off"]]
        : [["", "default"], ...f.choices.map(c => [c, c])];
      input = node("select", { id }, ...options.map(([value, textContent]) => node("option", { value, textContent })));
    } else if (f.kind === "int" || f.kind === "number" || f.kind === "moments") {
      input = node("input", { id, type: "number", step: f.kind === "int" ? "1" : "any" });
      if (f.min !== null) input.min = String(f.min);
      if (f.max !== null) input.max = String(f.max);
    } else {
      input = node("input", { id, type: "text" });
    }
    input.dataset.flag = f.flag;
    if (f.example !== null && input.tagName === "INPUT") input.placeholder = `e.g. ${f.example}`;
    const unit = f.unit ? ` (${f.unit})` : "";
    return node("label", { class: "field", title: `${f.flag}: ${f.help}` }, `${f.key.replace(/_/g, " ")}${unit}`,
                input);
  }

  function moreValue(f) {
    const e = $(`f-${f.key}`);
    const v = e.value.trim();
    if (v === "") return undefined;
    if (f.kind === "bool") return v === "true";
    if (f.kind === "int" || f.kind === "number" || f.kind === "moments"
        || (f.choices && f.choices.every(c => /^[0-9]+$/.test(c)))) {
      const n = Number(v);
      return Number.isFinite(n) ? n : v;        // the server names a non-number
    }
    return v;
  }

  function buildMore(fields) {
    inferKeys = new Set(fields.infer.map(f => f.key).concat(["hf_config", "hf_name"]));
    moreFields = fields.plan.filter(f => SPEC_ROOTS.has(f.root) && !HAND_MADE.has(f.key));
    const groups = new Map();
    for (const f of moreFields) {
      if (!groups.has(f.group)) groups.set(f.group, []);
      groups.get(f.group).push(moreInput(f));
    }
    $("more-fields").replaceChildren(...[...groups].map(([group, inputs]) =>
      node("fieldset", {}, node("legend", { textContent: group }), node("div", { class: "grid2" }, ...inputs))));
  }

  const FLAG_OF = { preset: "--preset", hf_config: "--hf-config", layers: "--layers", hidden: "--hidden",
                    heads: "--heads", kv_heads: "--kv-heads", ffn: "--ffn", vocab: "--vocab", mlp: "--mlp",
                    seq_len: "--seq-len", micro_batch: "--micro-batch", global_batch: "--global-batch",
                    precision: "--precision", gpu: "--gpu", gpus: "--gpus", gpus_per_node: "--gpus-per-node" };

  function cliCommand(base, top) {
    const parts = ["fitplan", "plan"];
    for (const [k, flag] of Object.entries(FLAG_OF)) {
      if (base[k] === undefined) continue;
      parts.push(flag, k === "hf_config" ? `${base.hf_name || "hf-model"}/config.json` : String(base[k]));
    }
    for (const f of moreFields) {
      const v = base[f.key];
      if (v === undefined) continue;
      if (f.kind === "bool") parts.push(v ? f.flag : (f.off_flag || f.flag));
      else parts.push(f.flag, /\s/.test(String(v)) ? `"${v}"` : String(v));
    }
    parts.push("--suggest");
    if (top !== undefined && top !== 5) parts.push("--top", String(top));
    parts.push("--json");
    return parts.join(" ");
  }

  // the layout settings a suggestion carries beyond its degrees (issue 13); null: the default
  const SETTINGS = ["schedule", "first_stage_layers", "last_stage_layers", "shard_degree", "reshard_after_forward",
                    "recompute_num_layers", "recompute_method"];
  function configFlags(s) {
    const out = { tp: s.tp, pp: s.pp, dp: s.dp, cp: s.cp, ep: s.ep, zero: s.zero, recompute: s.recompute,
                  virtual_stages: s.virtual_stages, micro_batch: s.micro_batch,
                  sequence_parallel: s.sequence_parallel };
    for (const k of SETTINGS) if (s[k] !== undefined && s[k] !== null) out[k] = s[k];
    return out;
  }
  const configKey = s => [s.tp, s.pp, s.dp, s.cp, s.ep, s.zero, s.sequence_parallel, s.recompute, s.micro_batch,
                          s.virtual_stages].join("/");
  function stageList(layers) {   // 7, 8×14, 7
    const out = [];
    for (let i = 0; i < layers.length;) {
      let j = i;
      while (j + 1 < layers.length && layers[j + 1] === layers[i]) j++;
      out.push(j === i ? `${layers[i]}` : `${layers[i]}×${j - i + 1}`);
      i = j + 1;
    }
    return out.join(", ");
  }
  function configText(s) {
    const bits = [`tp ${s.tp}`, `pp ${s.pp}`, `dp ${s.dp}`];
    if (s.cp > 1) bits.push(`cp ${s.cp}`);
    if (s.ep > 1) bits.push(`ep ${s.ep}`);
    if (s.virtual_stages > 1) bits.push(`v ${s.virtual_stages}`);
    return bits.join(" · ");
  }
  function configExtras(s) {
    const bits = [];
    if (s.sequence_parallel) bits.push("SP");
    bits.push(s.recompute === "none" ? "no recompute" : `${s.recompute} recompute`);
    if (s.zero) bits.push(`ZeRO-${s.zero}`);
    if (s.micro_batch > 1) bits.push(`mb ${s.micro_batch}`);
    if (s.schedule && s.schedule !== "1f1b") bits.push(s.schedule);
    if (s.shard_degree) bits.push(`shard ${s.shard_degree}`);
    if (s.reshard_after_forward === false) bits.push("no reshard");
    if (s.recompute_num_layers) bits.push(`${s.recompute_method} ${s.recompute_num_layers} layers`);
    if (s.pp > 1 && s.stage_layers) bits.push(`stages ${stageList(s.stage_layers)}`);
    if (s.offload && s.offload !== "none") bits.push(`offload ${s.offload}`);
    return bits.join(" · ");
  }

  // ------------------------------------------------------------------ errors next to the field

  function clearError() {
    $("error").hidden = true;
    $("error").textContent = "";
    for (const e of document.querySelectorAll(".invalid")) e.classList.remove("invalid");
    for (const e of document.querySelectorAll(".field-error")) e.remove();
  }

  function fieldFor(message) {
    const flag = message.match(/--[a-z][a-z-]*/);
    if (flag) {
      const e = document.querySelector(`[data-flag="${flag[0]}"]`);
      if (e && !e.closest("[hidden]")) return e;
    }
    const name = message.match(/'([a-z_]+)'/);
    if (name && FIELD_IDS[name[1]]) return $(FIELD_IDS[name[1]]);
    const spec = message.match(/\b(?:model|training|cluster)\.([a-z_]+)/);     // a spec check: cluster.num_gpus
    if (spec && SPEC_FIELDS[spec[1]]) return $(SPEC_FIELDS[spec[1]]);
    return null;
  }

  function showError(message) {
    clearError();
    $("error").textContent = message;
    $("error").hidden = false;
    const field = fieldFor(message);
    if (field) {
      field.classList.add("invalid");
      const label = field.closest("label") || field;
      label.after(node("p", { class: "field-error", textContent: message }));
    }
    $("results").classList.add("stale");
  }

  // ------------------------------------------------------------------ the answer

  function renderVerdict(plan) {
    const v = $("verdict"), d = $("verdict-detail"), c = plan.cluster, m = plan.model;
    const where = `${m.name} on ${int(c.num_gpus)} × ${c.gpu}`;
    $("proof").hidden = true;
    const assumed = (plan.assumed || []).map(a => node("li", { textContent: a }));
    $("assumed").replaceChildren(...assumed);
    $("assumed").hidden = !assumed.length;
    if (plan.feasible) {
      const r = plan.recommended, mv = plan.minimum_viable;
      const layout = (s, id) => node("strong", { id, textContent: `${configText(s)} · ${configExtras(s)}` });
      const memory = s => `peak ${gib(s.per_gpu_bytes)} GiB of ${gib(plan.usable_bytes_per_gpu)} GiB usable per GPU `
        + `(${gib(s.headroom_bytes)} GiB headroom; risk ${s.risk.level}, at ${s.peak.phase})`
        + (s.host && s.host.bytes_per_node ? `, ${gib(s.host.bytes_per_node)} GiB of host memory per node` : "")
        + (s.time ? `, ${fmt(s.time.step_s, 3)} s per step` + (band(s.time) ? ` (${band(s.time)} s, `
                    + `${Math.round(100 * s.time.uncertainty.coverage)}% band)` : "") : "");
      const shown = r || mv;   // the layout the verdict stands for
      if (shown && shown.risk.level === "tight") {
        v.className = "verdict tight";
        v.replaceChildren("Fits, tight", node("span", { id: "verdict-band", class: "band", textContent: riskBand(shown, plan.usable_bytes_per_gpu) }));
      } else {
        v.className = "verdict fits";
        v.textContent = "Fits";
      }
      const parts = [`${where}: ${int(plan.candidates.fit)} of ${int(plan.candidates.considered)} configurations `
                     + "fit. Recommended (the fastest that fits with margin, or else the fastest that fits): "];
      if (r) {
        parts.push(layout(r, "recommended"), `, ${memory(r)}. `,
                   node("span", { id: "export-recommended" }, "Export it: ", exportButtons(r, "the recommended layout")),
                   " ");
        if (plan.recommend_note) parts.push(node("span", { id: "recommend-note", textContent: `${plan.recommend_note}. ` }));
        if (r.to_train && r.to_train.days !== null) {
          const tt = r.to_train, u = tt.uncertainty;   // u: the step's band carried to days and cost
          const range = (key, f) => (u && u[key] ? ` (${f(u[key][0])}–${f(u[key][1])})` : "");
          const days = x => fmt(x, 1), money = x => int(Math.round(x));
          parts.push(node("span", { id: "to-train", textContent:
            `To train ${int(tt.tokens)} tokens: ${days(tt.days)}${range("days", days)} days, `
            + `${int(Math.round(tt.gpu_hours))} GPU-hours, ${fmt(tt.energy_mwh, 1)} MWh`
            + (tt.cost === null ? "" : `, cost ${money(tt.cost)}${range("cost", money)}`)
            + (u ? ` (in brackets: the step's ${Math.round(100 * u.coverage)}% band)` : "") + ". " }));
        }
      }
      else parts.push(node("strong", { id: "recommended", textContent: "none" }), ` (${plan.recommend_note}). `);
      if (mv && !(r && configKey(r) === configKey(mv)))
        parts.push("Minimum viable (least disturbance): ", layout(mv, "minimum-viable"), `, ${memory(mv)}. `,
                   node("span", { id: "export-minimum-viable" }, "Export it: ",
                        exportButtons(mv, "the minimum viable layout")));
      d.replaceChildren(...parts);
      return;
    }
    v.className = "verdict nofit";
    v.textContent = "Does not fit";
    d.textContent = `${where}: none of ${int(plan.candidates.considered)} configurations fits in `
      + `${gib(plan.usable_bytes_per_gpu)} GiB usable per GPU.`;
    const lb = plan.lower_bound;
    $("proof").hidden = false;
    $("proof-inequality").textContent = lb.inequality;
    const p = $("proof-smallest");
    p.replaceChildren();
    if (!lb.excludes) {
      const reasons = Object.entries(plan.candidates.rejected_by_reason).map(([k, n]) => `${k} ${int(n)}`).join(", ");
      p.append(`The bound alone does not rule this count out; every candidate was rejected (${reasons}). `);
    }
    if (lb.smallest_fitting_gpus) {
      p.append("Smallest GPU count that fits: ", node("strong", { id: "smallest-gpus",
               textContent: int(lb.smallest_fitting_gpus) }));
      if (lb.smallest_fitting_gpus_power_of_two) {
        p.append(` (${int(lb.smallest_fitting_gpus_power_of_two)} as a power of two). `);
      }
      const b = node("button", { type: "button", textContent: `try ${lb.smallest_fitting_gpus} GPUs` });
      b.addEventListener("click", () => { $("gpus").value = lb.smallest_fitting_gpus; schedule(0); });
      p.append(b);
    } else {
      p.append(`No GPU count from ${int(lb.min_gpus)} up that the search tried fits.`);
    }
  }

  /** One button per export format for this layout. */
  function exportButtons(s, what = "this configuration") {
    const ex = node("div", { class: "export-cell" });
    for (const [format, label] of EXPORTS) {
      const b = node("button", { type: "button", class: "export-btn", textContent: label, "data-format": format,
                                 title: `export ${what} for ${label}` });
      b.addEventListener("click", () => doExport(s, format, label));
      ex.append(b);
    }
    return ex;
  }

  /** The risk band of a tight layout: risk.band_bytes where the plan states one, else its peak's share of
   * GPU memory against the 80% margin (fitplan.analysis.risk). */
  function riskBand(s, usable) {
    const b = s.risk.band_bytes;   // [low, high] around the peak (fitplan.analysis.peak_band)
    if (Array.isArray(b) && b.length === 2)
      return `peak ${gib(s.per_gpu_bytes)} GiB (${gib(b[0])}–${gib(b[1])} GiB of ${gib(usable)} usable)`;
    return `peak at ${fmt(100 * s.risk.peak_fraction_of_capacity, 1)}% of GPU memory, above the 80% margin`;
  }

  function renderTable(id, plan, rank) {
    const box = $(id);
    box.replaceChildren();
    if (!plan.suggestions.length) {
      box.append(node("p", { class: "empty", textContent: "nothing fits, so there is nothing to rank" }));
      return;
    }
    const head = ["#", "tp", "pp", "dp", "cp", "ep", "ZeRO", "SP", "recompute", "mb", "v", "GiB/GPU", "headroom",
                  "step s (80% band)", "tokens/s", "MFU", "why this rank · export"];
    const table = node("table", { class: "suggestions", "data-rank": rank });
    table.append(node("thead", {}, node("tr", {}, ...head.map(h => node("th", { textContent: h })))));
    const body = node("tbody");
    plan.suggestions.forEach((s, i) => {
      const t = s.time;
      const tr = node("tr", { "data-tp": s.tp, "data-pp": s.pp, "data-dp": s.dp, "data-cp": s.cp, "data-ep": s.ep,
                              "data-sp": s.sequence_parallel, "data-recompute": s.recompute, "data-zero": s.zero });
      const cells = [i + 1, s.tp, s.pp, s.dp, s.cp, s.ep, s.zero, s.sequence_parallel ? "on" : "off", s.recompute,
                     s.micro_batch, s.virtual_stages, gib(s.per_gpu_bytes), gib(s.headroom_bytes),
                     t ? stepWithBand(t) : "–", t ? int(Math.round(t.tokens_per_s)) : "–",
                     t ? `${fmt(100 * t.mfu, 1)}%` : "–"];
      cells.forEach((c, j) => tr.append(node("td", { class: j === 7 || j === 8 ? "" : "num", textContent: String(c) })));
      tr.append(node("td", { class: "why" }, node("div", { textContent: s.rank_reason }), exportButtons(s)));
      body.append(tr);
    });
    table.append(body);
    box.append(table);
  }

  function renderMemory(configs, breakdowns, plan) {
    const rows = configs.map((c, i) => {
      const b = breakdowns[i].data;
      const parts = b.peak.held;   // what the GPU holds at its peak (sums to per_gpu_bytes)
      return { label: configText(c), sublabel: `${configExtras(c)}   ${c.ranks.join(", ")}`, parts,
               total: b.per_gpu_bytes };
    });
    FitCharts.memoryBars($("memory-chart"), rows, {
      usable: plan.usable_bytes_per_gpu, capacity: plan.cluster.memory_bytes_per_gpu,
      empty: `Nothing legal runs on ${plan.cluster.num_gpus} GPUs, so there is nothing to draw; the chart below `
             + "shows the GPU count where it starts to fit." });
  }

  function renderTimeline(plan) {
    const r = plan.recommended || plan.minimum_viable;
    const note = $("timeline-note");
    if (!r) {
      note.textContent = "";
      FitCharts.timeline($("timeline-chart"), [], { empty: "nothing fits, so there is no step to draw" });
      return;
    }
    const c = plan.cluster;
    const which = plan.recommended ? "The recommended layout" : "Nothing is recommended; the minimum viable layout";
    note.textContent = `${which}, ${configText(r)} · ${configExtras(r)}: peak ${gib(r.peak.bytes)} GiB at `
      + `${r.peak.phase} (${r.peak.stage} stage); risk ${r.risk.level}. ${r.risk.rule}.`;
    FitCharts.timeline($("timeline-chart"), r.timeline, {
      usable: plan.usable_bytes_per_gpu, capacity: c.memory_bytes_per_gpu, margin: r.risk.limit_bytes });
  }

  function renderSweep(sweep, plan, gpus) {
    const box = $("sweep-chart");
    if (sweep instanceof Error) {
      box.replaceChildren(node("p", { class: "empty", textContent: sweep.message }));
      return;
    }
    const s = sweep.data;
    FitCharts.sweep(box, s.points, { usable: s.usable_bytes_per_gpu, capacity: plan.cluster.memory_bytes_per_gpu,
                                     current: gpus, smallest: s.smallest_fitting });
    box.append(node("p", { class: "hint", textContent: s.smallest_fitting
      ? `Among these counts the smallest that fits is ${int(s.smallest_fitting)} GPUs.`
      : "None of these counts fits." }));
  }

  function sweepValues(gpus) {
    const values = new Set();
    const last = Math.max(4096, gpus || 1);
    for (let v = 1; v <= last && values.size < 40; v *= 2) values.add(v);
    if (Number.isInteger(gpus) && gpus >= 1 && gpus <= 2 ** 20) values.add(gpus);
    return [...values].sort((a, b) => a - b);
  }

  // ------------------------------------------------------------------ one update

  function schedule(delay = DEBOUNCE_MS) {
    document.body.dataset.busy = "1";     // cleared when the answer for the latest input is drawn
    clearTimeout(timer);
    timer = setTimeout(() => { timer = null; update(); }, delay);
  }

  // serving memory (fitplan infer) for the same model and GPU: one instance on tp GPUs
  async function updateServing(base, signal, g) {
    const box = $("serving");
    if (!box) return;
    // only what serving takes (GET /api/fields' infer list): the training form's sequence length, batch,
    // precision and layout are the training plan's, not the served instance's
    const body = Object.fromEntries(Object.entries(base).filter(([k]) => inferKeys.has(k)));
    for (const k of ["tp", "pp"]) delete body[k];
    for (const id of ["serve_tp", "serve_batch", "serve_context"]) {
      const v = numberOf(id);
      if (v !== undefined) body[{ serve_tp: "tp", serve_batch: "batch", serve_context: "context" }[id]] = v;
    }
    for (const id of ["serve_weights", "serve_kv"]) {
      const v = $(id).value;
      if (v) body[{ serve_weights: "weight_precision", serve_kv: "kv_precision" }[id]] = v;
    }
    body.gpus = body.tp || 1;
    try {
      const r = (await post("/api/infer", body, signal)).data;
      if (g !== generation) return;
      box.textContent = `${r.fits ? "fits" : "does not fit"}: weights ${gib(r.weights_bytes_per_gpu)} GiB and KV cache `
        + `${gib(r.kv_cache_bytes_per_gpu)} GiB per GPU; largest batch ${int(r.max_batch)} at this context, largest `
        + `context ${int(r.max_context)} at this batch; decode step >= ${fmt(1000 * r.decode_step_s_lower_bound, 2)} ms`;
    } catch (e) {
      if (e.name === "AbortError") throw e;
      box.textContent = e.message;
    }
  }

  async function update() {
    const g = ++generation;
    if (controller) controller.abort();
    controller = new AbortController();
    const signal = controller.signal;
    const base = collect();
    const top = numberOf("top");
    $("cli-command").textContent = cliCommand(base, top);
    if (!current || JSON.stringify(current.base) !== JSON.stringify(base)) $("export-panel").hidden = true;
    $("results").classList.add("busy");
    try {
      const withTop = top === undefined ? {} : { top };
      const [dist, thr, sweep] = await Promise.all([
        post("/api/plan", { ...base, ...withTop, suggest: true, rank: "disturbance" }, signal),
        post("/api/plan", { ...base, ...withTop, suggest: true, rank: "throughput" }, signal),
        post("/api/sweep", { ...base, over: "gpus", values: sweepValues(base.gpus) }, signal)
          .catch(e => { if (e.name === "AbortError") throw e; return e; }),
      ]);
      if (g !== generation) return;
      clearError();
      $("results").classList.remove("stale");
      current = { base, top, dist: dist.data, thr: thr.data };
      renderVerdict(dist.data);
      renderTable("table-disturbance", dist.data, "disturbance");
      renderTable("table-throughput", thr.data, "throughput");
      renderSweep(sweep, dist.data, base.gpus);
      renderTimeline(dist.data);

      const seen = new Map();
      // each bar's place in the two rankings, in words: "least disturbance #1, fastest #2"
      for (const [tag, plan] of [["least disturbance", dist.data], ["fastest", thr.data]]) {
        plan.suggestions.forEach((s, i) => {
          const k = configKey(s);
          if (!seen.has(k)) seen.set(k, { ...s, ranks: [] });
          seen.get(k).ranks.push(`${tag} #${i + 1}`);
        });
      }
      const configs = [...seen.values()];
      if (!configs.length && dist.data.least_loaded)   // nothing fits: draw the closest miss against the line
        configs.push({ ...dist.data.least_loaded, ranks: ["least loaded, does not fit"] });
      const [breakdowns] = await Promise.all([
        Promise.all(configs.map(c => post("/api/plan", { ...base, ...configFlags(c) }, signal))),
        updateCompare(base, signal, g)]);
      if (g !== generation) return;
      renderMemory(configs, breakdowns, dist.data);
      await updateServing(base, signal, g);
    } catch (e) {
      if (e.name === "AbortError" || g !== generation) return;
      showError(e.message);
    } finally {
      if (g === generation) {
        $("results").classList.remove("busy");
        document.body.dataset.ready = String(g);
        if (timer === null) delete document.body.dataset.busy;
      }
    }
  }

  // ------------------------------------------------------------------ export and markdown

  function download(text, name, type) {
    const url = URL.createObjectURL(new Blob([text], { type }));
    const a = node("a", { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  async function doExport(s, format, label) {
    if (!current) return;
    const panel = $("export-panel");
    panel.hidden = false;
    $("export-title").textContent = `${label}: ${configText(s)} · ${configExtras(s)}`;
    $("export-text").textContent = "exporting…";
    $("export-notes").textContent = "";
    try {
      const r = (await post("/api/export", { ...current.base, ...configFlags(s), format })).data;
      const text = $("export-text");
      text.textContent = r.text;
      text.classList.toggle("warn", !r.ok);
      $("export-notes").textContent = r.ok ? r.notes.join("\n") : `${label} cannot express this configuration:`;
      const name = EXPORTS.find(e => e[0] === format)[2];
      $("export-download").hidden = !r.ok;
      $("export-download").onclick = ev => { ev.preventDefault(); download(r.text, name, "text/plain"); };
      $("export-copy").onclick = () => navigator.clipboard && navigator.clipboard.writeText(r.text);
    } catch (e) {
      $("export-text").textContent = e.message;
      $("export-text").classList.add("warn");
    }
    panel.scrollIntoView({ behavior: "smooth", block: "nearest" });
  }

  async function downloadMarkdown(ev) {
    ev.preventDefault();
    if (!current) return;
    const link = $("download-md");
    try {
      const top = current.top === undefined ? {} : { top: current.top };
      const r = await post("/api/markdown", { ...current.base, ...top, suggest: true, rank: "disturbance" });
      const m = current.dist.model.name.replace(/[^A-Za-z0-9._-]+/g, "-");
      download(r.text, `fitplan-${m}-${current.dist.cluster.num_gpus}gpus.md`, "text/markdown");
      link.dataset.downloaded = "1";
    } catch (e) {
      showError(e.message);
    }
  }

  // ------------------------------------------------------------------ the comparison section

  function comparePlaceholder() {
    $("compare").replaceChildren(node("p", { class: "placeholder", id: "compare-placeholder",
      textContent: "Placeholder: this section shows the TP / PP / hybrid comparison with step-time shares from "
                   + "`fitplan compare --json` once this fitplan has that subcommand. It does not yet." }));
  }

  async function updateCompare(base, signal, g) {
    if (!presets.features.compare) return comparePlaceholder();
    const box = $("compare");
    try {
      const r = await post("/api/compare", base, signal);
      if (g !== generation) return;
      box.replaceChildren(...(Array.isArray(r.data.layouts) ? renderCompare(r.data) : renderGeneric(r.data)));
    } catch (e) {
      if (e.name === "AbortError" || g !== generation) return;
      box.replaceChildren(node("p", { class: "empty", textContent: e.message }));
    }
  }

  // The step-time parts [key, label, colour], from the server's table of parts (fitplan.parts).
  let SHARE_TERMS = [];

  /** `fitplan compare --json`: one row per layout with its step-time shares as a 100% bar. */
  function renderCompare(data) {
    const head = ["layout", "tp", "pp", "dp", "recompute", "GiB/GPU", "fits", "step s (80% band)", "tokens/s", "MFU",
                  "step-time shares"];
    const table = node("table", { class: "suggestions compare", id: "compare-table" });
    table.append(node("thead", {}, node("tr", {}, ...head.map(h => node("th", { textContent: h })))));
    const body = node("tbody");
    for (const l of data.layouts) {
      const c = l.config || {};
      const tr = node("tr", { "data-layout": l.name, class: l.name === data.preferred ? "preferred" : "" });
      tr.append(node("td", { textContent: l.name === data.preferred ? `${l.name} ★` : l.name }));
      for (const k of ["tp", "pp", "dp"]) tr.append(node("td", { class: "num", textContent: c[k] ?? "–" }));
      tr.append(node("td", { textContent: c.recompute ?? "–" }));
      if (l.problem) {
        tr.append(node("td", { class: "why", colSpan: 6, textContent: `cannot be built: ${l.problem}` }));
        body.append(tr);
        continue;
      }
      const t = l.time;
      tr.append(node("td", { class: "num", textContent: gib(l.per_gpu_bytes) }),
                node("td", { textContent: l.fits ? "yes" : "no", class: l.fits ? "" : "bad" }),
                node("td", { class: "num", textContent: stepWithBand(t) }),
                node("td", { class: "num", textContent: int(Math.round(t.tokens_per_s)) }),
                node("td", { class: "num", textContent: `${fmt(100 * t.mfu, 1)}%` }));
      const shares = {}, colors = [];
      for (const [k, label, color] of SHARE_TERMS) {
        if ((t.parts_s[k] || 0) > 0) { shares[label] = t.parts_s[k]; colors.push(color); }
      }
      const td = node("td", { class: "shares" }, FitCharts.shareBar(shares, colors));
      const total = Object.values(shares).reduce((a, b) => a + b, 0) || 1;
      td.append(node("div", { class: "share-text", textContent: Object.entries(shares)
        .filter(([, v]) => v / total >= 0.005).map(([k, v]) => `${k} ${fmt(100 * v / total, 1)}%`).join(" · ") }));
      tr.append(td);
      body.append(tr);
    }
    table.append(body);
    const out = [node("div", { class: "table-wrap" }, table)];
    out.push(node("div", { class: "legend" }, ...SHARE_TERMS.map(([, label, color]) => {
      const sw = node("span", { class: "swatch" });
      sw.style.background = color;
      return node("span", { class: "legend-item" }, sw, label);
    })));
    if (data.reasons && data.reasons.length) {
      out.push(node("h3", { textContent: data.preferred ? `Why ${data.preferred}` : "Why none" }),
               node("ul", { class: "reasons" }, ...data.reasons.map(r => node("li", { textContent: r }))));
    }
    if (data.monitor && data.monitor.length) {
      const mt = node("table", { class: "suggestions" });
      mt.append(node("thead", {}, node("tr", {}, ...["metric", "expected", "what it catches"].map(h => node("th", { textContent: h })))));
      const mb = node("tbody");
      for (const m of data.monitor) {
        mb.append(node("tr", {}, node("td", { textContent: m.metric }),
                       node("td", { class: "num", textContent: `${Number(m.expected).toPrecision(3)} ${m.unit}` }),
                       node("td", { class: "why", textContent: m.catches })));
      }
      mt.append(mb);
      out.push(node("details", {}, node("summary", { textContent: "what to watch on the real run" }),
                    node("div", { class: "table-wrap" }, mt)));
    }
    return out;
  }

  /** The compare JSON, drawn without knowing its exact schema: each list of objects becomes a
      table of its plain fields, and any object of numbers named *share* a 100% bar. */
  function renderGeneric(data) {
    const out = [];
    const colors = ["#2e75b6", "#c55a11", "#8fbc5a", "#8a6d1f", "#6fa8dc", "#f0a868", "#4e8a2e"];
    const lists = Object.entries(data).filter(([, v]) => Array.isArray(v) && v.length && typeof v[0] === "object");
    for (const [name, list] of lists) {
      const cols = Object.keys(list[0]).filter(k => list[0][k] === null || typeof list[0][k] !== "object");
      const table = node("table", { class: "suggestions compare" });
      table.append(node("thead", {}, node("tr", {}, ...cols.map(c => node("th", { textContent: c })),
                                           node("th", { textContent: "shares" }))));
      const body = node("tbody");
      for (const row of list) {
        const tr = node("tr");
        for (const c of cols) {
          const v = row[c];
          tr.append(node("td", { textContent: typeof v === "number" && !Number.isInteger(v) ? fmt(v, 3) : String(v) }));
        }
        const td = node("td");
        for (const [k, v] of Object.entries(row)) {
          if (/share|parts/.test(k) && v && typeof v === "object" && Object.values(v).every(x => typeof x === "number")) {
            td.append(FitCharts.shareBar(v, colors));
          }
        }
        tr.append(td);
        body.append(tr);
      }
      table.append(body);
      out.push(node("h3", { textContent: name }), node("div", { class: "table-wrap" }, table));
    }
    const raw = node("details", {}, node("summary", { textContent: "the JSON" }),
                     node("pre", { textContent: JSON.stringify(data, null, 2) }));
    out.push(raw);
    return out;
  }

  // ------------------------------------------------------------------ start

  function fillSelect(sel, entries, first) {
    sel.replaceChildren();
    if (first) sel.append(node("option", { value: "", textContent: first }));
    for (const [value, label] of entries) sel.append(node("option", { value, textContent: label }));
  }

  function presetChanged() {
    const p = presets.models[$("preset").value];
    if (!p) return;
    const gpu = presets.gpus[p.gpu];
    $("preset-info").textContent = `L ${p.num_layers} · h ${int(p.hidden_size)} · ${p.num_heads} heads`
      + ` (${p.num_kv_heads} kv) · V ${int(p.vocab_size)} · ${p.mlp}; trained at s ${int(p.seq_len)}`
      + (p.global_batch ? `, global batch ${int(p.global_batch)}` : "") + `; default GPU ${p.gpu}`;
    $("seq_len").placeholder = String(p.seq_len);
    $("micro_batch").placeholder = String(p.micro_batch);
    $("global_batch").placeholder = p.global_batch ? String(p.global_batch) : "not given";
    $("gpus_per_node").placeholder = gpu ? String(gpu.gpus_per_node) : "";
    $("gpu").options[0].textContent = `model default (${p.gpu})`;
  }

  function sourceChanged() {
    const mode = source();
    for (const d of document.querySelectorAll(".source")) d.hidden = d.dataset.source !== mode;
    if (mode !== "preset") {
      $("seq_len").placeholder = "required";
      $("micro_batch").placeholder = "1";
      $("global_batch").placeholder = "not given";
      $("gpu").options[0].textContent = `default (${presets.default_gpu})`;
    } else {
      presetChanged();
    }
  }

  async function start() {
    try {
      const r = await request("/api/presets", {});
      presets = await r.json();
    } catch (e) {
      showError("cannot load the presets from the fitplan server");
      return;
    }
    try {
      buildMore(await (await request("/api/fields", {})).json());
    } catch (e) {
      showError("cannot load the field list from the fitplan server");
      return;
    }
    $("version").textContent = presets.fitplan_version;
    FitCharts.useParts(presets.parts);
    SHARE_TERMS = presets.parts.filter(p => p.group === "time").map(p => [p.key, p.label, p.color]);
    const models = Object.keys(presets.models);
    fillSelect($("preset"), models.map(n => [n, n]));
    $("preset").value = models.includes(DEFAULT_PRESET) ? DEFAULT_PRESET : models[0];
    fillSelect($("gpu"), Object.entries(presets.gpus).map(([n, g]) => [n, `${n} (${gib(g.memory_bytes)} GiB)`]),
               "model default");
    fillSelect($("precision"), Object.entries(presets.recipes).map(([n, r]) => [n, `${n} (${r.bytes_per_param} B/param)`]),
               `default (${presets.default_recipe})`);
    if (!presets.features.compare) comparePlaceholder();
    presetChanged();

    const form = $("inputs");
    form.addEventListener("input", ev => {
      if (ev.target.name === "source") sourceChanged();
      if (ev.target.id === "preset") presetChanged();
      if (ev.target.type !== "file") schedule(ev.target.tagName === "SELECT" ? 0 : DEBOUNCE_MS);
    });
    form.addEventListener("change", ev => {
      if (ev.target.name === "source") { sourceChanged(); schedule(0); }
    });
    form.addEventListener("submit", ev => { ev.preventDefault(); schedule(0); });
    $("serving-panel").addEventListener("input", () => {
      if (current) updateServing(current.base, undefined, generation).catch(e => { $("serving").textContent = e.message; });
    });
    $("hf-file").addEventListener("change", ev => {
      const file = ev.target.files[0];
      if (!file) return;
      if (file.size > presets.limits.max_body_bytes) {
        showError(`${file.name}: ${int(file.size)} bytes; a config.json is a few KiB, the limit is `
                  + `${int(presets.limits.max_body_bytes)} bytes`);
        return;
      }
      document.body.dataset.busy = "1";      // an answer is coming: the file is read first
      const reader = new FileReader();
      reader.onerror = () => { showError(`${file.name}: cannot read the file`); delete document.body.dataset.busy; };
      reader.onload = () => {
        $("hf-config").value = reader.result;
        const stem = file.name === "config.json" ? "hf-model" : file.name.replace(/\.json$/i, "");
        $("hf-name").value = stem.replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^[^A-Za-z0-9]+/, "") || "hf-model";
        schedule(0);
      };
      reader.readAsText(file);
    });
    $("download-md").addEventListener("click", downloadMarkdown);
    $("export-close").addEventListener("click", () => { $("export-panel").hidden = true; });
    schedule(0);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
