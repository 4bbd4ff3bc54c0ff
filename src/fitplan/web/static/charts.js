/* fitplan's two charts, drawn as SVG by hand: no library, nothing fetched.
   FitCharts.useParts(parts)  the terms' labels and colours, from GET /api/presets (fitplan.parts)
   FitCharts.memoryBars(el, rows, {usable, capacity})  stacked per-GPU bytes by term
   FitCharts.sweep(el, points, {usable, capacity, current, smallest})  per-GPU bytes against GPU count
   FitCharts.timeline(el, events, {usable, capacity, margin})  one GPU's bytes over the step, by group */
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const GiB = 2 ** 30;
  // The memory terms [key, label, colour] and the reserve, from the server's table of parts
  // (GET /api/presets -> parts, fitplan.parts): set by useParts before the first chart.
  let TERMS = [];
  let RESERVE = { label: "reserve", color: "#cfcfcf" };

  function useParts(parts) {
    TERMS = parts.filter(p => ["states", "activations", "runtime"].includes(p.group)).map(p => [p.key, p.label, p.color]);
    RESERVE = parts.find(p => p.group === "reserve") || RESERVE;
  }

  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function gib(bytes) {
    return (bytes / GiB).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }
  function svgRoot(w, h, label) {
    return el("svg", { viewBox: `0 0 ${w} ${h}`, width: "100%", role: "img", "aria-label": label,
                       preserveAspectRatio: "xMinYMin meet", class: "fit-chart" });
  }
  function legend(entries) {
    const box = document.createElement("div");
    box.className = "legend";
    for (const [, label, color, extra] of entries) {
      const item = document.createElement("span");
      item.className = "legend-item";
      const sw = document.createElement("span");
      sw.className = "swatch" + (extra ? " " + extra : "");
      if (color) sw.style.background = color;
      item.append(sw, document.createTextNode(label));
      box.append(item);
    }
    return box;
  }
  function niceStep(range, target) {
    const raw = range / target;
    const p = 10 ** Math.floor(Math.log10(raw));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function memoryBars(container, rows, opts) {
    container.replaceChildren();
    if (!rows.length) {
      const p = document.createElement("p");
      p.className = "empty";
      p.textContent = opts.empty || "nothing to draw";
      container.append(p);
      return;
    }
    const W = 960, labelW = 250, rightW = 96, barH = 24, gap = 12, top = 34, axisH = 28;
    const plotW = W - labelW - rightW;
    const H = top + rows.length * (barH + gap) + axisH;
    const maxBytes = Math.max(opts.capacity || 0, ...rows.map(r => r.total)) * 1.03;
    const x = b => labelW + (b / maxBytes) * plotW;
    const svg = svgRoot(W, H, "per-GPU memory of each suggestion by term, against the usable memory");
    const plotBottom = top + rows.length * (barH + gap) - gap / 2;

    const defs = el("defs");
    const pat = el("pattern", { id: "reserve-hatch", width: 8, height: 8, patternUnits: "userSpaceOnUse",
                                patternTransform: "rotate(45)" });
    pat.append(el("rect", { width: 8, height: 8, fill: "#f1f1f1" }), el("line", { x1: 0, y1: 0, x2: 0, y2: 8,
               stroke: RESERVE.color, "stroke-width": 3 }));
    defs.append(pat);
    svg.append(defs);

    // grid and axis (GiB)
    const step = niceStep(maxBytes / GiB, 8);
    const axis = el("g", { class: "axis" });
    for (let v = 0; v * GiB <= maxBytes; v += step) {
      const xv = x(v * GiB);
      axis.append(el("line", { x1: xv, y1: top - 6, x2: xv, y2: plotBottom, class: "grid" }));
      axis.append(el("text", { x: xv, y: plotBottom + 18, "text-anchor": "middle" }, `${+v.toFixed(2)}`));
    }
    axis.append(el("text", { x: W - rightW + 8, y: plotBottom + 18, "text-anchor": "start" }, "GiB per GPU"));
    svg.append(axis);

    if (opts.capacity && opts.usable && opts.capacity > opts.usable) {
      svg.append(el("rect", { x: x(opts.usable), y: top - 6, width: x(opts.capacity) - x(opts.usable),
                              height: plotBottom - top + 6, fill: "url(#reserve-hatch)", class: "reserve-zone" }));
    }

    rows.forEach((r, i) => {
      const y = top + i * (barH + gap);
      const g = el("g", { class: "bar", "data-label": r.label, "data-total": r.total });
      g.append(el("text", { x: labelW - 10, y: y + barH / 2 - 2, "text-anchor": "end", class: "bar-label" }, r.label));
      if (r.sublabel) {
        g.append(el("text", { x: labelW - 10, y: y + barH / 2 + 11, "text-anchor": "end", class: "bar-sublabel" },
                     r.sublabel));
      }
      let acc = 0;
      for (const [key, label, color] of TERMS) {
        const b = r.parts[key] || 0;
        if (b <= 0) continue;
        const seg = el("rect", { x: x(acc), y, width: Math.max(0.5, x(acc + b) - x(acc)), height: barH, fill: color,
                                 class: "bar-seg", "data-term": key });
        seg.append(el("title", {}, `${label}: ${gib(b)} GiB`));
        g.append(seg);
        acc += b;
      }
      const over = opts.usable && r.total > opts.usable;
      let tx = x(acc) + 6;     // the total, clear of the usable and capacity lines
      const lineL = x(Math.min(opts.usable || Infinity, opts.capacity || Infinity)) - 4;
      const lineR = x(Math.max(opts.usable || 0, opts.capacity || 0)) + 6;
      if (opts.usable && tx + 72 > lineL && tx < lineR) tx = lineR;
      g.append(el("text", { x: tx, y: y + barH / 2 + 4, class: over ? "bar-total over" : "bar-total" },
                   `${gib(r.total)} GiB`));
      svg.append(g);
    });

    if (opts.usable) {
      const xu = x(opts.usable);
      svg.append(el("line", { x1: xu, y1: top - 12, x2: xu, y2: plotBottom, class: "usable-line" }));
      svg.append(el("text", { x: xu - 4, y: top - 16, "text-anchor": "end", class: "usable-label" },
                   `usable ${gib(opts.usable)} GiB`));
    }
    if (opts.capacity) {
      const xc = x(opts.capacity);
      svg.append(el("line", { x1: xc, y1: top - 12, x2: xc, y2: plotBottom, class: "capacity-line" }));
      svg.append(el("text", { x: xc + 4, y: top - 16, "text-anchor": "start", class: "capacity-label" },
                   `capacity ${gib(opts.capacity)}`));
    }
    container.append(svg);
    const present = TERMS.filter(([k]) => rows.some(r => (r.parts[k] || 0) > 0));
    container.append(legend([...present, ["", RESERVE.label, "", "hatch"]]));
  }

  function sweep(container, points, opts) {
    container.replaceChildren();
    const pts = points.filter(p => p.per_gpu_bytes !== null && p.per_gpu_bytes > 0);
    if (!pts.length) {
      const p = document.createElement("p");
      p.className = "empty";
      p.textContent = "no configuration is legal at any of these GPU counts";
      container.append(p);
      return;
    }
    const W = 960, H = 340, L = 78, R = 24, T = 22, B = 48;
    const xs = points.map(p => p.x);
    const lx = v => Math.log2(v);
    const x0 = lx(Math.min(...xs)), x1 = lx(Math.max(...xs));
    const x = v => L + (x1 === x0 ? 0.5 : (lx(v) - x0) / (x1 - x0)) * (W - L - R);
    const ys = pts.map(p => p.per_gpu_bytes / GiB);
    const lines = [opts.usable, opts.capacity].filter(Boolean).map(b => b / GiB);
    let lo = Math.min(...ys, ...lines) / 1.4, hi = Math.max(...ys, ...lines) * 1.4;
    const y = v => T + (1 - (Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * (H - T - B);
    const svg = svgRoot(W, H, "least per-GPU memory against GPU count, with the usable-memory line");

    const axis = el("g", { class: "axis" });
    const ticks = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of [1, 2, 5]) {
        const v = m * 10 ** e;
        if (v >= lo && v <= hi) ticks.push(v);
      }
    }
    for (const v of ticks) {
      axis.append(el("line", { x1: L, y1: y(v), x2: W - R, y2: y(v), class: "grid" }));
      axis.append(el("text", { x: L - 8, y: y(v) + 4, "text-anchor": "end" },
                   v >= 1 ? v.toLocaleString("en-US") : String(+v.toPrecision(2))));
    }
    for (const v of xs) {
      axis.append(el("line", { x1: x(v), y1: T, x2: x(v), y2: H - B, class: "grid light" }));
      axis.append(el("text", { x: x(v), y: H - B + 18, "text-anchor": "middle" }, v.toLocaleString("en-US")));
    }
    axis.append(el("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle", class: "axis-title" },
                 "GPUs (log scale)"));
    axis.append(el("text", { x: 16, y: (T + H - B) / 2, "text-anchor": "middle", class: "axis-title",
                             transform: `rotate(-90 16 ${(T + H - B) / 2})` }, "GiB per GPU (log scale)"));
    svg.append(axis);

    if (opts.current) {
      const xc = x(opts.current);
      svg.append(el("line", { x1: xc, y1: T, x2: xc, y2: H - B, class: "current-line" }));
      svg.append(el("text", { x: xc + 5, y: T + 12, class: "current-label" }, `${opts.current} GPUs (yours)`));
    }
    if (opts.capacity) {
      const yc = y(opts.capacity / GiB);
      svg.append(el("line", { x1: L, y1: yc, x2: W - R, y2: yc, class: "capacity-line" }));
      svg.append(el("text", { x: W - R - 4, y: yc - 5, "text-anchor": "end", class: "capacity-label" },
                   `capacity ${gib(opts.capacity)} GiB`));
    }
    if (opts.usable) {
      const yu = y(opts.usable / GiB);
      svg.append(el("line", { x1: L, y1: yu, x2: W - R, y2: yu, class: "usable-line" }));
      svg.append(el("text", { x: W - R - 4, y: yu + 15, "text-anchor": "end", class: "usable-label" },
                   `usable ${gib(opts.usable)} GiB`));
    }
    svg.append(el("polyline", { points: pts.map(p => `${x(p.x)},${y(p.per_gpu_bytes / GiB)}`).join(" "),
                                class: "sweep-line" }));
    for (const p of pts) {
      const c = el("circle", { cx: x(p.x), cy: y(p.per_gpu_bytes / GiB), r: 5,
                               class: p.fits ? "sweep-point fits" : "sweep-point no" });
      c.append(el("title", {}, `${p.x} GPUs: ${gib(p.per_gpu_bytes)} GiB per GPU, ${p.fits ? "fits" : "does not fit"}`));
      svg.append(c);
    }
    if (opts.smallest) {
      const p = pts.find(q => q.x === opts.smallest);
      if (p) {
        svg.append(el("text", { x: x(p.x) + 9, y: y(p.per_gpu_bytes / GiB) - 9, class: "smallest-label" },
                     `smallest that fits: ${p.x}`));
      }
    }
    container.append(svg);
    container.append(legend([["", "fits", "#2f8f46", "dot"], ["", "does not fit", "#c0392b", "dot"],
                             ["", "usable memory per GPU", "", "usable"], ["", "GPU capacity", "", "capacity"]]));
  }

  /* A stacked 100% bar of shares (for the comparison section). */
  function shareBar(shares, colors) {
    const W = 600, H = 22;
    const svg = svgRoot(W, H, "step-time shares");
    const total = Object.values(shares).reduce((a, b) => a + Math.max(0, b), 0) || 1;
    let acc = 0, i = 0;
    for (const [k, v] of Object.entries(shares)) {
      const w = (Math.max(0, v) / total) * W;
      const r = el("rect", { x: acc, y: 0, width: w, height: H, fill: colors[i++ % colors.length], class: "share-seg" });
      r.append(el("title", {}, `${k}: ${(100 * v / total).toFixed(1)}%`));
      svg.append(r);
      acc += w;
    }
    return svg;
  }

  /* One GPU's memory over the step (fitplan.memory.timeline): a stacked column per event (states,
     runtime buffers, activations), the steady state's pair once with its count, the usable,
     80%-of-capacity and capacity lines, the peak marked. */
  const GROUP_COLORS = { states: "#3182bd", runtime: "#31a354", activations: "#e6550d" };

  function timeline(container, events, opts) {
    container.replaceChildren();
    if (!events || !events.length) {
      const p = document.createElement("p");
      p.className = "empty";
      p.textContent = opts.empty || "nothing to draw";
      container.append(p);
      return;
    }
    const W = 960, L = 64, R = 16, T = 26, B = 96;
    const H = 320;
    const n = events.length;
    const colW = (W - L - R) / n;
    const maxBytes = Math.max(opts.capacity || 0, ...events.map(e => e.bytes)) * 1.08;
    const y = b => T + (1 - b / maxBytes) * (H - T - B);
    const svg = svgRoot(W, H, "memory of the busiest GPU over the step, event by event, against the usable memory");
    const axis = el("g", { class: "axis" });
    const step = niceStep(maxBytes / GiB, 6);
    for (let v = 0; v * GiB <= maxBytes; v += step) {
      axis.append(el("line", { x1: L, y1: y(v * GiB), x2: W - R, y2: y(v * GiB), class: "grid" }));
      axis.append(el("text", { x: L - 6, y: y(v * GiB) + 4, "text-anchor": "end" }, `${+v.toFixed(2)}`));
    }
    axis.append(el("text", { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", class: "axis-title",
                             transform: `rotate(-90 14 ${(T + H - B) / 2})` }, "GiB on this GPU"));
    svg.append(axis);
    let top = 0;
    events.forEach((e, i) => { if (e.bytes > events[top].bytes) top = i; });
    events.forEach((e, i) => {
      const g = el("g", { class: "tl-event", "data-phase": e.phase, "data-bytes": e.bytes });
      let acc = 0;
      for (const group of ["states", "runtime", "activations"]) {
        const b = e.by_group[group] || 0;
        if (b <= 0) continue;
        const r = el("rect", { x: L + i * colW + 1, y: y(acc + b), width: Math.max(1, colW - 2),
                               height: Math.max(0.5, y(acc) - y(acc + b)), fill: GROUP_COLORS[group] });
        r.append(el("title", {}, `${e.phase}${e.repeat > 1 ? ` (x ${e.repeat})` : ""}: ${group} ${gib(b)} GiB`));
        g.append(r);
        acc += b;
      }
      if (n <= 40 || i === top || i === n - 1) {
        const x = L + (i + 0.5) * colW, ty = H - B + 8;
        const short = e.phase.replace("micro-batch ", "mb ").replace("forward of", "F").replace("backward of", "B")
          + (e.repeat > 1 ? ` x${e.repeat}` : "");
        g.append(el("text", { x, y: ty, "text-anchor": "end", class: "tl-label",
                              transform: `rotate(-60 ${x} ${ty})` }, short));
      }
      svg.append(g);
    });
    // the three lines' labels sit apart: capacity at the right, usable at the left, the margin in the middle
    for (const [value, cls, text, x, anchor] of [
      [opts.capacity, "capacity-line", "capacity", W - R - 4, "end"], [opts.usable, "usable-line", "usable", L + 4, "start"],
      [opts.margin, "margin-line", "80% of capacity", (L + W - R) / 2, "middle"]]) {
      if (!value) continue;
      svg.append(el("line", { x1: L, y1: y(value), x2: W - R, y2: y(value), class: cls }));
      svg.append(el("text", { x, y: y(value) - 4, "text-anchor": anchor, class: cls.replace("line", "label") },
                   `${text} ${gib(value)} GiB`));
    }
    const px = L + (top + 0.5) * colW;
    svg.append(el("text", { x: px, y: y(events[top].bytes) - 6, "text-anchor": "middle", class: "tl-peak",
                            id: "timeline-peak" }, `peak ${gib(events[top].bytes)} GiB`));
    container.append(svg);
    container.append(legend([["", "states", GROUP_COLORS.states], ["", "runtime buffers", GROUP_COLORS.runtime],
                             ["", "activations", GROUP_COLORS.activations]]));
  }

  window.FitCharts = { useParts, memoryBars, sweep, shareBar, timeline, gib };
})();
