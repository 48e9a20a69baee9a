// sidequest dashboard: live refresh, relative times, confirmations and small SVG charts.
// Hand-written, no dependencies. Every page works without it; this only keeps it current.
//
// - Every `poll` ms (the <body data-poll> value) it reads `<root>/api/stats` and writes the
//   numbers into every element with a matching `data-stat`; the dashboard feeds its charts,
//   whose first reading is the one the page was served with (`#first-reading`), after the
//   last hour's per-minute runs and failures (`#rate-history`) and each queue's longest wait per
//   minute (`#latency-history`) it was served with.
// - A <main data-refresh> is re-fetched with `X-Sidequest-Fragment: 1` (the server answers with
//   the page's content only, escaped as always) and swapped in, unless the reader is busy with
//   it: something ticked, typed, selected or opened.
// - `data-since` (epoch s) shows a running duration, `data-time` a relative time.
// - `<script type="application/json" data-chart="line|bars">` blocks become SVG charts.
"use strict";
(function () {
  const body = document.body;
  const root = body.dataset.root || "";
  const poll = Math.max(500, parseInt(body.dataset.poll || "2000", 10));
  const page = body.dataset.page;
  const SVG = "http://www.w3.org/2000/svg";
  let skew = 0; // server clock - local clock, in seconds
  let live = localStorage.getItem("sidequest.live") !== "off";
  let failures = 0;

  // -- formatting -----------------------------------------------------------------------
  const nf = new Intl.NumberFormat("en-US");
  function num(v) { return nf.format(v); }
  function compact(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1).replace(/\.0$/, "") + "B";
    if (a >= 1e6) return (v / 1e6).toFixed(1).replace(/\.0$/, "") + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1).replace(/\.0$/, "") + "k";
    if (a > 0 && a < 10 && v % 1 !== 0) return String(parseFloat(v.toFixed(a < 1 ? 2 : 1)));
    return num(Math.round(v));
  }
  function duration(s) {
    s = Math.max(0, Math.floor(s));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }
  function seconds(v) {
    if (v < 0.01) return v === 0 ? "0" : (v * 1000).toFixed(1).replace(/\.0$/, "") + " ms";
    if (v < 1) return (v * 1000).toFixed(0) + " ms";
    if (v < 60) return v.toFixed(v < 10 && v % 1 ? 1 : 0) + " s";
    if (v < 3600 && v % 60 === 0) return v / 60 + " min";
    if (v % 3600 === 0) return v / 3600 + " h";
    return duration(v);
  }
  function relative(t) {
    const d = t - (Date.now() / 1000 + skew);
    const a = Math.abs(d);
    let text;
    if (a < 5) return "just now";
    if (a < 60) text = Math.round(a) + " s";
    else if (a < 3600) text = Math.round(a / 60) + " min";
    else if (a < 86400) text = Math.round(a / 3600) + " h";
    else text = Math.round(a / 86400) + " d";
    return d > 0 ? "in " + text : text + " ago";
  }
  function now() { return Date.now() / 1000 + skew; }

  // -- times and durations ------------------------------------------------------------
  function tick(scope) {
    (scope || document).querySelectorAll("[data-since]").forEach(function (el) {
      el.textContent = duration(now() - parseFloat(el.dataset.since));
    });
    (scope || document).querySelectorAll("[data-time]").forEach(function (el) {
      const t = parseFloat(el.dataset.time);
      if (!t) return;
      el.textContent = relative(t);
      if (!el.title) el.title = new Date(t * 1000).toLocaleString();
    });
  }

  // -- live numbers ---------------------------------------------------------------------
  function setStats(stats) {
    document.querySelectorAll("[data-stat]").forEach(function (el) {
      const v = stats[el.dataset.stat];
      if (typeof v !== "number") return;
      el.textContent = el.dataset.format === "seconds" ? seconds(v) : num(v);
      if (v === 0) el.setAttribute("data-zero", ""); else el.removeAttribute("data-zero");
    });
  }

  async function getJSON(url) {
    const res = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" });
    if (!res.ok) throw new Error(res.status + " " + url);
    return res.json();
  }

  function busyWith(main) {
    if (main.querySelector("input[type=checkbox]:checked, details[open]")) return true;
    const active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) return true;
    const sel = window.getSelection();
    if (sel && !sel.isCollapsed && main.contains(sel.anchorNode)) return true;
    return false;
  }

  let refreshed = Date.now();
  async function refreshFragment() {
    const main = document.getElementById("content");
    if (!main || !main.hasAttribute("data-refresh") || busyWith(main)) return;
    const every = parseInt(main.dataset.refresh || "0", 10) || 0; // a slower page asks for less
    if (Date.now() - refreshed < every) return;
    refreshed = Date.now();
    const res = await fetch(location.href, { headers: { "X-Sidequest-Fragment": "1" }, credentials: "same-origin", cache: "no-store" });
    if (!res.ok) throw new Error(res.status + " fragment");
    if (res.redirected) { location.reload(); return; } // to a login page, say: show it whole
    const html = await res.text();
    if (busyWith(main)) return; // the reader started something while we waited
    const kept = {};
    main.querySelectorAll("[data-keep][id]").forEach(function (node) { kept[node.id] = node; });
    main.innerHTML = html;
    main.querySelectorAll("[data-keep][id]").forEach(function (node) {
      if (kept[node.id]) node.replaceWith(kept[node.id]);
    });
    hydrate(main);
  }

  let timer = null;
  async function beat() {
    timer = null;
    if (live && !document.hidden) {
      try {
        const stats = await getJSON(root + "/api/stats");
        skew = stats.time - Date.now() / 1000;
        setStats(stats);
        if (dashboard) dashboard.add(stats);
        await refreshFragment();
        failures = 0;
      } catch (e) {
        failures += 1;
      }
      const btn = document.querySelector("[data-live-toggle]");
      if (btn) btn.classList.toggle("stale", failures > 1);
    }
    schedule();
  }
  function schedule() { if (!timer) timer = setTimeout(beat, poll); }

  function setLive(on) {
    live = on;
    localStorage.setItem("sidequest.live", on ? "on" : "off");
    const btn = document.querySelector("[data-live-toggle]");
    if (btn) {
      btn.setAttribute("aria-pressed", on ? "true" : "false");
      btn.querySelector(".live-label").textContent = on ? "Live" : "Paused";
    }
  }

  // -- charts ---------------------------------------------------------------------------
  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }
  function color(i) { return "var(--c" + ((i % 6) + 1) + ")"; }
  // the top of the y axis: four equal steps of 1, 2, 2.5 or 5 times a power of ten
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const step = v / 4, p = Math.pow(10, Math.floor(Math.log10(step)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= step) return 4 * m * p;
    return 40 * p;
  }
  // the same for durations: steps a reader counts in (seconds, minutes, hours)
  const TIME_STEPS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300,
    600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400];
  function niceMaxSeconds(v) {
    if (!(v > 0)) return 1;
    for (const step of TIME_STEPS) if (4 * step >= v) return 4 * step;
    return niceMax(v);
  }
  function clockLabel(t, seconds) {
    const d = new Date(t * 1000);
    const two = function (n) { return (n < 10 ? "0" : "") + n; };
    return two(d.getHours()) + ":" + two(d.getMinutes()) + (seconds ? ":" + two(d.getSeconds()) : "");
  }
  const tip = document.createElement("div");
  tip.className = "chart-tip";
  function showTip(evt, text) {
    tip.textContent = text;
    tip.style.display = "block";
    tip.style.left = Math.min(evt.clientX + 12, window.innerWidth - tip.offsetWidth - 8) + "px";
    tip.style.top = (evt.clientY - 34) + "px";
  }
  function hideTip() { tip.style.display = "none"; }

  function frame(svg) {
    const w = Math.max(200, svg.clientWidth || svg.parentNode.clientWidth || 600);
    const h = Math.max(120, svg.clientHeight || 200);
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    return { w: w, h: h, l: 44, r: 10, t: 10, b: 24 };
  }
  function yAxis(svg, f, max, fmt) {
    for (let i = 0; i <= 4; i++) {
      const v = max * i / 4, y = f.h - f.b - (f.h - f.t - f.b) * i / 4;
      el("line", { x1: f.l, x2: f.w - f.r, y1: y, y2: y, class: "grid" }, svg);
      const label = el("text", { x: f.l - 6, y: y + 4, "text-anchor": "end" }, svg);
      label.textContent = fmt(v);
    }
  }

  // series: [{name, points: [[t, v], ...]}]; x is time (epoch s) over [from, to]
  function lineChart(svg, series, opts) {
    const f = frame(svg);
    const fmt = opts.format === "seconds" ? seconds : compact;
    let max = 0;
    series.forEach(function (s) { s.points.forEach(function (p) { if (p[1] > max) max = p[1]; }); });
    max = opts.format === "seconds" ? niceMaxSeconds(max) : niceMax(max);
    yAxis(svg, f, max, fmt);
    const from = opts.from, to = opts.to, span = Math.max(1, to - from);
    const x = function (t) { return f.l + (f.w - f.l - f.r) * (t - from) / span; };
    const y = function (v) { return f.h - f.b - (f.h - f.t - f.b) * v / max; };
    const ticks = Math.max(2, Math.min(6, Math.floor((f.w - f.l - f.r) / 80)));
    const withSeconds = span < 600;
    for (let i = 0; i <= ticks; i++) {
      const t = from + span * i / ticks;
      const label = el("text", { x: x(t), y: f.h - 6, "text-anchor": i === 0 ? "start" : i === ticks ? "end" : "middle" }, svg);
      label.textContent = clockLabel(t, withSeconds);
    }
    if (!series.some(function (s) { return s.points.some(function (p) { return p[1] !== null; }); })) {
      const t = el("text", { x: (f.w + f.l) / 2, y: f.h / 2, "text-anchor": "middle", class: "chart-empty" }, svg);
      t.textContent = opts.empty || "collecting…";
      return;
    }
    series.forEach(function (s, i) {
      if (!s.points.length) return;
      let pen = "M";
      const d = s.points.map(function (p) {
        if (p[1] === null) { pen = "M"; return ""; } // a gap: nothing measured there
        const step = pen + x(p[0]).toFixed(1) + " " + y(p[1]).toFixed(1);
        pen = "L";
        return step;
      }).join("");
      if (opts.area && i === 0) {
        const last = s.points[s.points.length - 1], first = s.points[0];
        el("path", { d: d + "L" + x(last[0]).toFixed(1) + " " + y(0) + "L" + x(first[0]).toFixed(1) + " " + y(0) + "Z", class: "area", fill: s.color || color(i) }, svg);
      }
      el("path", { d: d, class: "line", stroke: s.color || color(i) }, svg);
      s.points.forEach(function (p, j) { // a reading with no neighbour draws no line: show it as a dot
        const before = s.points[j - 1], after = s.points[j + 1];
        if (p[1] !== null && (!before || before[1] === null) && (!after || after[1] === null)) {
          el("circle", { cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 3, fill: s.color || color(i) }, svg);
        }
      });
    });
    const hover = el("rect", { x: f.l, y: f.t, width: f.w - f.l - f.r, height: f.h - f.t - f.b, fill: "transparent" }, svg);
    hover.addEventListener("mousemove", function (evt) {
      const box = svg.getBoundingClientRect();
      const t = from + span * ((evt.clientX - box.left) * (f.w / box.width) - f.l) / (f.w - f.l - f.r);
      const parts = series.map(function (s) {
        let best = null;
        s.points.forEach(function (p) { if (p[1] !== null && (!best || Math.abs(p[0] - t) < Math.abs(best[0] - t))) best = p; });
        return best ? s.name + " " + fmt(best[1]) : "";
      }).filter(Boolean);
      showTip(evt, parts.join(" · "));
    });
    hover.addEventListener("mouseleave", hideTip);
  }

  // data: {labels: [...], series: [{name, values: [...]}]}; bars of later series drawn in front
  function barChart(svg, data, opts) {
    const f = frame(svg);
    const fmt = opts.format === "seconds" ? seconds : compact;
    let max = 0;
    data.series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) max = v; }); });
    max = niceMax(max);
    yAxis(svg, f, max, fmt);
    const n = data.labels.length, slot = (f.w - f.l - f.r) / Math.max(1, n);
    const bw = Math.max(2, Math.min(36, slot * 0.7));
    const every = Math.ceil(n / Math.max(1, Math.floor((f.w - f.l) / 64)));
    data.labels.forEach(function (label, i) {
      const cx = f.l + slot * i + slot / 2;
      if (i % every === 0) {
        const t = el("text", { x: cx, y: f.h - 6, "text-anchor": "middle" }, svg);
        t.textContent = label;
      }
      data.series.forEach(function (s, k) {
        const v = s.values[i] || 0;
        const hgt = (f.h - f.t - f.b) * v / max;
        const bar = el("rect", { x: cx - bw / 2, y: f.h - f.b - hgt, width: bw, height: Math.max(0, hgt), class: "bar", fill: s.color || color(k) }, svg);
        bar.addEventListener("mousemove", function (evt) {
          showTip(evt, label + ": " + data.series.map(function (z) { return z.name + " " + num(z.values[i] || 0); }).join(" · "));
        });
        bar.addEventListener("mouseleave", hideTip);
      });
    });
    if (max <= 1 && !data.series.some(function (s) { return s.values.some(function (v) { return v > 0; }); })) {
      const t = el("text", { x: (f.w + f.l) / 2, y: f.h / 2, "text-anchor": "middle", class: "chart-empty" }, svg);
      t.textContent = opts.empty || "nothing yet";
    }
  }

  function legend(holder, series) {
    if (!holder) return;
    holder.textContent = "";
    series.forEach(function (s, i) {
      const item = document.createElement("span");
      const sw = document.createElement("i");
      sw.style.background = s.color || color(i);
      item.appendChild(sw);
      item.appendChild(document.createTextNode(s.name));
      holder.appendChild(item);
    });
  }

  // Static charts: a JSON block followed by the <svg> to draw in (and an optional .legend).
  function drawStatic(scope) {
    scope.querySelectorAll("script[data-chart]").forEach(function (block) {
      const svg = document.getElementById(block.dataset.target);
      if (!svg) return;
      const data = JSON.parse(block.textContent);
      const opts = { format: block.dataset.format, empty: block.dataset.empty };
      const draw = function () {
        if (block.dataset.chart === "bars") barChart(svg, data, opts);
        else lineChart(svg, data.series, Object.assign(opts, { from: data.from, to: data.to }));
        legend(document.getElementById(block.dataset.target + "-legend"), data.series);
      };
      draw();
      svg._draw = draw;
    });
  }

  // -- the dashboard's live charts ----------------------------------------------------------
  const WINDOW = 300; // seconds shown while no job ran in the last hour
  const HOUR = 3600; // seconds shown with the hour's per-minute history (#rate-history)
  const AVERAGE = 10; // seconds a rate is averaged over (stats reach Redis with each heartbeat)
  const dashboard = page === "dashboard" ? {
    samples: [],
    history: [], // [[minute's start, runs, failed], ...] of the finished minutes, from the page
    // {queues: [name, ...], minutes: [[minute's start, longest wait or null per queue], ...]}, from the page
    latency: { queues: [], minutes: [] },
    span: function () { return this.history.length || this.latency.minutes.length ? HOUR : WINDOW; },
    add: function (s) {
      this.samples.push({ t: s.time, processed: s.processed, failed: s.failed, queues: s.queues });
      while (this.samples.length && this.samples[0].t < s.time - this.span() - AVERAGE) this.samples.shift();
      this.draw();
    },
    rates: function (field) {
      const out = [], xs = this.samples;
      for (let i = 1; i < xs.length; i++) {
        let j = i - 1;
        while (j > 0 && xs[i].t - xs[j - 1].t <= AVERAGE) j--;
        const dt = xs[i].t - xs[j].t;
        if (dt > 0) out.push([xs[i].t, Math.max(0, (xs[i][field] - xs[j][field]) / dt)]);
      }
      return out;
    },
    // a minute's mean rate at its middle, then a gap, then the live rates
    withHistory: function (index, live, from) {
      const past = this.history.filter(function (m) { return m[0] + 30 >= from; })
        .map(function (m) { return [m[0] + 30, m[index] / 60]; });
      live = live.filter(function (p) { return p[0] >= from; });
      return past.length && live.length ? past.concat([[past[past.length - 1][0], null]], live) : past.concat(live);
    },
    draw: function () {
      const to = this.samples.length ? this.samples[this.samples.length - 1].t : now();
      // the live window grows from a minute to WINDOW as readings come in; with history the
      // throughput chart shows the hour
      const liveFrom = Math.max(to - WINDOW, Math.min(to - 20, this.samples.length ? this.samples[0].t : to));
      const from = this.history.length ? to - HOUR : liveFrom;
      const rateSvg = document.getElementById("chart-rate");
      if (rateSvg) {
        const series = [
          { name: "processed/s", points: this.withHistory(1, this.rates("processed"), from), color: "var(--c1)" },
          { name: "failed/s", points: this.withHistory(2, this.rates("failed"), from), color: "var(--c2)" },
        ];
        lineChart(rateSvg, series, { from: from, to: to, area: true });
        legend(document.getElementById("chart-rate-legend"), series);
      }
      const latSvg = document.getElementById("chart-latency");
      if (latSvg) this.drawLatency(latSvg, this.latency.minutes.length ? to - HOUR : liveFrom, to);
    },
    // each queue's longest wait per minute (at the minute's middle, a gap where none of its jobs
    // started), then a gap, then the live readings; the queues waiting longest now (or in the hour) first
    drawLatency: function (svg, from, to) {
      const byQueue = {}, peak = {};
      this.samples.forEach(function (smp) {
        if (smp.t < from) return;
        (smp.queues || []).forEach(function (q) { (byQueue[q.name] = byQueue[q.name] || []).push([smp.t, q.latency]); });
      });
      const past = {};
      this.latency.queues.forEach(function (name, i) {
        past[name] = this.latency.minutes.filter(function (m) { return m[0] + 30 >= from; })
          .map(function (m) { return [m[0] + 30, m[i + 1]]; });
        peak[name] = Math.max.apply(null, past[name].map(function (p) { return p[1] || 0; }).concat([0]));
      }, this);
      const last = function (n) { return byQueue[n] ? byQueue[n][byQueue[n].length - 1][1] : -1; };
      const names = Object.keys(Object.assign({}, byQueue, past)).sort(function (a, b) {
        return last(b) - last(a) || (peak[b] || 0) - (peak[a] || 0) || (a < b ? -1 : 1);
      }).slice(0, 6);
      const series = names.map(function (n, i) {
        const before = past[n] || [], live = byQueue[n] || [];
        const points = before.length && live.length ? before.concat([[before[before.length - 1][0], null]], live) : before.concat(live);
        return { name: n, points: points, color: color(i) };
      });
      lineChart(svg, series, { from: from, to: to, format: "seconds", empty: names.length ? "collecting…" : "no queues" });
      legend(document.getElementById("chart-latency-legend"), series);
    },
  } : null;

  // -- forms ----------------------------------------------------------------------------------
  document.addEventListener("submit", function (evt) {
    const form = evt.target;
    const button = evt.submitter;
    const message = (button && button.dataset.confirm) || form.dataset.confirm;
    if (message && !window.confirm(message)) evt.preventDefault();
  });
  document.addEventListener("change", function (evt) {
    const box = evt.target;
    if (box.matches && box.matches("input[data-select-all]")) {
      const form = box.form || box.closest("form");
      if (form) form.querySelectorAll("input[type=checkbox][name=key]").forEach(function (c) { c.checked = box.checked; });
    }
  });
  document.addEventListener("click", function (evt) {
    const toggle = evt.target.closest && evt.target.closest("[data-live-toggle]");
    if (toggle) { setLive(!live); if (live) { clearTimeout(timer); timer = null; beat(); } }
  });

  function hydrate(scope) {
    tick(scope);
    drawStatic(scope);
  }

  let resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      document.querySelectorAll("svg.chart").forEach(function (svg) { if (svg._draw) svg._draw(); });
      if (dashboard) dashboard.draw();
    }, 150);
  });
  document.addEventListener("visibilitychange", function () { if (!document.hidden && live) { clearTimeout(timer); timer = null; beat(); } });

  function start() {
    const serverNow = parseFloat(body.dataset.now || "0");
    if (serverNow) skew = serverNow - Date.now() / 1000;
    document.body.appendChild(tip);
    const current = document.querySelector(".nav [aria-current]");
    if (current && current.offsetLeft + current.offsetWidth > current.parentNode.clientWidth) {
      current.parentNode.scrollLeft = current.offsetLeft - 12;
    }
    setLive(live);
    hydrate(document);
    if (dashboard) { // the first point is the reading the page was served with, so the charts match its table
      const history = document.getElementById("rate-history");
      if (history) dashboard.history = JSON.parse(history.textContent);
      const latency = document.getElementById("latency-history");
      const waits = latency ? JSON.parse(latency.textContent) : {};
      if (waits.minutes) dashboard.latency = waits; // {} when no job started in the hour
      const first = document.getElementById("first-reading");
      if (first) dashboard.add(JSON.parse(first.textContent)); else dashboard.draw();
    }
    setInterval(function () { tick(document); }, 1000);
    if (live) beat(); else schedule();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
