/*
 * Starling dashboard: line and bar charts as inline SVG (api/dashboard/charts.js),
 * used by app.js through window.StarlingCharts. No dependencies.
 */
'use strict';
window.StarlingCharts = (() => {
  const SVGNS = 'http://www.w3.org/2000/svg';

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k of Object.keys(attrs || {})) e.setAttribute(k, String(attrs[k]));
    if (text != null) e.textContent = text;
    return e;
  }

  const W = 560, H = 250, M = { l: 58, r: 14, t: 28, b: 34 };

  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) hi = lo + 1;
    let step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    const err = (hi - lo) / n / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out;
  }

  /*
   * chart - draw @spec into @svg. spec.x: {band: [categories]} or {lo, hi, fmt};
   * spec.y: {lo, hi, fmt, log}; spec.series: [{name, color, kind: 'line'|'bar',
   * dashed, pts: [[x, y, title]]}]. Every mark of the data is a circle or a
   * rect with data-pt and data-series.
   */
  function chart(svg, spec) {
    svg.textContent = '';
    const pw = W - M.l - M.r, ph = H - M.t - M.b;
    const total = spec.series.reduce((n, s) => n + s.pts.length, 0);
    if (total === 0) {
      svg.appendChild(svgEl('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' },
        spec.empty || 'no data yet'));
      return;
    }
    const y = spec.y;
    const yPos = y.log
      ? (v) => M.t + ph - (v > 0 ? (Math.log10(v) - Math.log10(y.lo)) / (Math.log10(y.hi) - Math.log10(y.lo)) * ph : 0)
      : (v) => M.t + ph - (v - y.lo) / (y.hi - y.lo) * ph;
    const band = spec.x.band;
    const bw = band ? pw / Math.max(1, band.length) : 0;
    const xPos = band
      ? (c) => M.l + (band.indexOf(c) + 0.5) * bw
      : (v) => M.l + (spec.x.hi > spec.x.lo ? (v - spec.x.lo) / (spec.x.hi - spec.x.lo) : 0.5) * pw;
    /* grid and axes */
    const yt = y.log ? logTicks(y.lo, y.hi) : niceTicks(y.lo, y.hi, 4);
    for (const v of yt) {
      const py = yPos(v);
      svg.appendChild(svgEl('line', { x1: M.l, x2: W - M.r, y1: py, y2: py, class: 'grid' }));
      svg.appendChild(svgEl('text', { x: M.l - 6, y: py + 4, 'text-anchor': 'end' }, y.fmt(v)));
    }
    svg.appendChild(svgEl('line', { x1: M.l, x2: W - M.r, y1: M.t + ph, y2: M.t + ph, class: 'axis' }));
    const xt = band ? band.filter((c, i) => i % Math.ceil(band.length / 12) === 0) : niceTicks(spec.x.lo, spec.x.hi, 5);
    for (const v of xt)
      svg.appendChild(svgEl('text', { x: xPos(v), y: H - M.b + 16, 'text-anchor': 'middle' }, spec.x.fmt(v)));
    svg.appendChild(svgEl('text', { x: M.l + pw / 2, y: H - 4, 'text-anchor': 'middle' }, spec.x.label));
    /* legend */
    let lx = M.l;
    for (const s of spec.series) {
      svg.appendChild(svgEl('rect', { x: lx, y: 8, width: 10, height: 10, fill: s.color, rx: 2 }));
      const t = svgEl('text', { x: lx + 14, y: 17 }, s.name);
      svg.appendChild(t);
      lx += 24 + s.name.length * 6.2;
    }
    /* data */
    const bars = spec.series.filter((s) => s.kind === 'bar');
    for (const s of spec.series) {
      const g = svgEl('g', {});
      if (s.kind === 'bar') {
        const k = bars.indexOf(s), w = bw * 0.8 / bars.length;
        for (const [cx, v, title] of s.pts) {
          const top = yPos(v), x0 = xPos(cx) - bw * 0.4 + k * w;
          const rect = svgEl('rect', { x: x0.toFixed(2), y: top.toFixed(2), width: Math.max(0.5, w - 0.5).toFixed(2),
            height: Math.max(0, M.t + ph - top).toFixed(2), fill: s.color, 'data-pt': v, 'data-series': s.key });
          rect.appendChild(svgEl('title', {}, title));
          g.appendChild(rect);
        }
      } else {
        const pts = s.pts.map(([px, py, title]) => [xPos(px), yPos(py), py, title]);
        if (pts.length > 1)
          g.appendChild(svgEl('path', { d: pts.map((p, i) => (i ? 'L' : 'M') + p[0].toFixed(2) + ' ' + p[1].toFixed(2)).join(''),
            fill: 'none', stroke: s.color, 'stroke-width': 2, 'stroke-dasharray': s.dashed ? '5 4' : 'none' }));
        for (const [px, py, v, title] of pts) {
          const c = svgEl('circle', { cx: px.toFixed(2), cy: py.toFixed(2), r: 3.2, fill: s.color,
            'data-pt': v, 'data-series': s.key });
          c.appendChild(svgEl('title', {}, title));
          g.appendChild(c);
        }
      }
      svg.appendChild(g);
    }
  }

  /* the smallest tick of niceTicks(0, v) at or above v */
  function niceMax(v) {
    const t = niceTicks(0, v, 4);
    const step = t.length > 1 ? t[1] - t[0] : 1;
    return Math.ceil(v / step - 1e-9) * step;
  }

  function logTicks(lo, hi) {
    const out = [];
    for (let e = Math.round(Math.log10(lo)); e <= Math.round(Math.log10(hi)); e++) out.push(Math.pow(10, e));
    return out;
  }

  return { chart, niceTicks, niceMax };
})();
