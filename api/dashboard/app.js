/*
 * Starling dashboard (api/dashboard/app.js), compiled into the coordinator.
 *
 * Reads the coordinator's own REST API (api/openapi.yaml) and nothing else:
 *   GET /v1/status            tasks, model versions, the current round
 *   GET /v1/rounds?task=N     the task's rounds (all pages on first load,
 *                             then the newest page on every poll)
 *   GET /v1/rounds/{id}       a round's statistics, incl. the version it
 *                             produced and the evaluator's metrics of it
 *   GET /v1/devices           the first MAX_DEVICES devices with their
 *                             participations, reports, rejections
 * and polls every POLL_MS without reloading. With the token-protected status
 * mode, the admin token is asked once, kept in sessionStorage and sent as a
 * Bearer token; "#token=..." in the address does the same (then is removed).
 *
 * Everything is drawn with DOM calls and textContent (no innerHTML: task
 * names, errors and capabilities come from the network). Numbers carry their
 * raw API value in data-v beside a data-k key, and chart marks carry data-pt,
 * so tests can compare the page with the API (tests/integration/test_dashboard.c).
 */
'use strict';
(() => {
  const POLL_MS = 2000;
  const DEVICE_EVERY = 15; /* polls between device scans */
  const MAX_DEVICES = 50;
  const PAGE = 1000; /* rounds per page on a full load (the API's maximum) */
  const RECENT = 50; /* rounds re-read on every poll */
  const TABLE_ROWS = 200;
  const VERSIONS_SHOWN = 30;
  const DETAILS_PER_POLL = 200; /* GET /v1/rounds/{id} calls at most per poll */
  const TOKEN_KEY = 'starling.token';
  const COLORS = { eval: '#2f6fdf', device: '#1f9d55', reported: '#2f6fdf', dropped: '#d64545',
    late: '#d08a00', up: '#2f6fdf', down: '#8a5cd1', dense: '#9aa3b2' };

  const st = {
    token: '', taskId: 0, loadedTask: 0, status: null, task: null,
    rounds: new Map(), details: new Map(), devices: [], devicesTotal: 0, devicesScanned: false,
    polls: 0, errors: 0, fetchErrors: 0, offsetMs: 0, timer: 0, busy: false, again: false,
  };

  const $ = (sel) => document.querySelector(sel);
  const body = document.body;

  /* ---- errors: counted into the DOM so a headless browser can read them ---- */
  function pageError(msg) {
    st.errors++;
    body.dataset.errors = String(st.errors);
    const c = $('#err-count');
    if (c) c.textContent = String(st.errors);
    banner('page error: ' + msg);
  }
  window.addEventListener('error', (e) => pageError(e.message || 'error'));
  window.addEventListener('unhandledrejection', (e) => pageError(String(e.reason)));

  function banner(text) {
    const b = $('#error-banner');
    if (!b) return;
    b.hidden = !text;
    b.textContent = text || '';
  }

  /* ---- the API --------------------------------------------------------------- */
  class HttpError extends Error {
    constructor(status, detail) {
      super('HTTP ' + status + (detail ? ': ' + detail : ''));
      this.status = status;
    }
  }

  class NetError extends Error {}

  function authHeaders() {
    return st.token ? { Authorization: 'Bearer ' + st.token } : {};
  }

  async function api(path) {
    const headers = Object.assign({ Accept: 'application/json' }, authHeaders());
    let r;
    try {
      r = await fetch(path, { headers, cache: 'no-store' });
    } catch (e) {
      throw new NetError(e.message || String(e)); /* no answer: the coordinator is away */
    }
    if (!r.ok) {
      let detail = '';
      try { detail = (await r.json()).detail || ''; } catch (_) { /* not a problem document */ }
      throw new HttpError(r.status, detail);
    }
    return r.json();
  }

  /* ---- formatting -------------------------------------------------------------- */
  const dash = '\u2013';
  function fmtInt(n) { return n == null ? dash : Number(n).toLocaleString('en-US'); }
  function fmtBytes(n) {
    if (n == null) return dash;
    const units = ['B', 'kB', 'MB', 'GB', 'TB'];
    let v = Number(n), i = 0;
    while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
    return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)) + ' ' + units[i];
  }
  function fmtPct(a) { return a == null ? dash : (100 * a).toFixed(1) + '%'; }
  function fmtDur(ms) {
    if (ms == null || ms < 0) return dash;
    const s = ms / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + Math.floor(s % 60) + ' s';
    return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
  }
  function fmtTime(ms) {
    if (!ms) return dash;
    return new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + 'Z';
  }
  function fmtAgo(ms) {
    if (!ms) return 'never';
    return fmtDur(Math.max(0, Date.now() + st.offsetMs - ms)) + ' ago';
  }
  function fmtRatio(x) { return x == null ? dash : (x >= 100 ? x.toFixed(0) : x.toFixed(1)) + '\u00d7'; }

  /* ---- DOM helpers ------------------------------------------------------------ */
  function setK(key, value, text) {
    for (const e of document.querySelectorAll('[data-k="' + key + '"]')) {
      e.dataset.v = value == null ? 'null' : String(value);
      e.textContent = text == null ? (value == null ? dash : String(value)) : text;
    }
  }
  function td(key, value, text, cls) {
    const c = document.createElement('td');
    if (key) {
      c.dataset.k = key;
      c.dataset.v = value == null ? 'null' : String(value);
    }
    c.textContent = text == null ? (value == null ? dash : String(value)) : text;
    if (cls) c.className = cls;
    return c;
  }
  function setConn(cls, text) {
    const c = $('#conn');
    c.className = 'conn' + (cls ? ' ' + cls : '');
    c.textContent = text;
  }

  /* ---- token ------------------------------------------------------------------ */
  function showLogin(msg) {
    body.dataset.state = 'need-token';
    $('#login').hidden = false;
    $('#app').hidden = true;
    $('#logout').hidden = true;
    $('#login-error').textContent = msg || '';
    setConn('', 'token needed');
    body.dataset.ready = '1';
    $('#token-input').focus();
  }
  function showApp() {
    body.dataset.state = 'live';
    $('#login').hidden = true;
    $('#app').hidden = false;
    $('#logout').hidden = !st.token;
  }

  /* ---- polling ------------------------------------------------------------------ */
  async function poll() {
    clearTimeout(st.timer);
    if (st.busy) { st.again = true; return; }
    if (document.hidden && body.dataset.ready === '1') { /* a background tab: wait until seen */
      st.timer = setTimeout(poll, POLL_MS);
      return;
    }
    st.busy = true;
    let stop = false;
    try {
      await refresh();
      banner('');
      setConn('live', 'live');
      $('#updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    } catch (e) {
      if (e instanceof HttpError && e.status === 401) {
        showLogin(st.token ? 'The token was refused.' : '');
        stop = true; /* until a token is entered */
      } else if (e instanceof HttpError || e instanceof NetError) {
        st.fetchErrors++;
        body.dataset.fetchErrors = String(st.fetchErrors);
        setConn('down', 'unreachable');
        banner('cannot read the coordinator: ' + e.message);
      } else {
        pageError(e && e.stack ? e.stack : String(e)); /* a bug of this page */
        console.error(e);
      }
    }
    st.polls++;
    body.dataset.polls = String(st.polls);
    st.busy = false;
    const again = st.again; /* asked for during this poll (a task switch, a token) */
    st.again = false;
    if (!stop || again) st.timer = setTimeout(poll, again ? 0 : POLL_MS);
  }

  async function refresh() {
    const status = await api('/v1/status');
    st.status = status;
    st.offsetMs = status.server.time_ms - Date.now();
    showApp();
    const tasks = status.tasks;
    renderTaskPicker(tasks);
    $('#empty').hidden = tasks.length > 0;
    $('#cards').hidden = tasks.length === 0;
    if (tasks.length === 0) { body.dataset.ready = '1'; return; }
    let task = tasks.find((t) => t.task_id === st.taskId);
    if (!task) {
      task = tasks.find((t) => !t.finished) || tasks[tasks.length - 1];
      st.taskId = task.task_id;
    }
    st.task = task;
    if (st.loadedTask !== task.task_id) {
      st.rounds.clear();
      st.details.clear();
      await loadRounds(task.task_id, true);
      st.loadedTask = task.task_id;
    } else {
      await loadRounds(task.task_id, false);
    }
    if (task.round && !st.rounds.has(task.round.round_id)) st.rounds.set(task.round.round_id, task.round);
    await loadDetails();
    if (!st.devicesScanned || st.polls % DEVICE_EVERY === 0) await loadDevices();
    render(task);
    body.dataset.ready = '1';
  }

  async function loadRounds(taskId, all) {
    const limit = all ? PAGE : RECENT;
    for (let offset = 0, pages = 0; pages < (all ? 20 : 1); pages++, offset += limit) {
      const page = await api('/v1/rounds?task=' + taskId + '&limit=' + limit + '&offset=' + offset);
      for (const r of page.rounds) st.rounds.set(r.round_id, r);
      if (page.rounds.length < limit) break;
    }
  }

  const isFinal = (state) => state === 'closed' || state === 'abandoned';

  /* Statistics of rounds not read yet or still moving; closed rounds whose
   * evaluator metrics have not arrived are re-read, the newest each poll and
   * the others now and then. */
  async function loadDetails() {
    const byNewest = [...st.rounds.values()].sort((a, b) => b.round_no - a.round_no);
    const want = [];
    let waiting = 0;
    for (const r of byNewest) {
      const d = st.details.get(r.round_id);
      if (!d || !isFinal(d.state) || d.state !== r.state && !isFinal(r.state)) want.push(r.round_id);
      else if (d.state === 'closed' && d.model_metrics == null &&
               (waiting++ < 3 || (st.polls % DEVICE_EVERY === 0 && waiting < 40)))
        want.push(r.round_id);
    }
    /* a long history is read over several polls, newest first, so the first
       picture comes quickly and the coordinator is never asked all at once */
    want.splice(DETAILS_PER_POLL);
    for (let i = 0; i < want.length; i += 6) {
      await Promise.all(want.slice(i, i + 6).map(async (id) => {
        try {
          const d = await api('/v1/rounds/' + id);
          st.details.set(id, d);
        } catch (e) {
          if (e instanceof HttpError && e.status === 404) st.rounds.delete(id);
          else throw e;
        }
      }));
    }
  }

  async function loadDevices() {
    const page = await api('/v1/devices?limit=' + MAX_DEVICES);
    st.devices = page.devices;
    st.devicesTotal = page.total;
    st.devicesScanned = true;
  }

  /* ---- rendering ------------------------------------------------------------------ */
  function renderTaskPicker(tasks) {
    const sel = $('#task-select');
    $('#task-pick').hidden = tasks.length < 2;
    const want = tasks.map((t) => t.task_id + ':' + t.name).join('|');
    if (sel.dataset.tasks === want) return;
    sel.dataset.tasks = want;
    sel.textContent = '';
    for (const t of tasks) {
      const o = document.createElement('option');
      o.value = String(t.task_id);
      o.textContent = t.task_id + ' \u00b7 ' + t.name;
      sel.appendChild(o);
    }
    if (st.taskId) sel.value = String(st.taskId);
  }

  /* Rounds oldest first, each the list record overlaid by its statistics. */
  function mergedRounds() {
    return [...st.rounds.values()]
      .map((r) => Object.assign({}, r, st.details.get(r.round_id) || {}))
      .sort((a, b) => a.round_no - b.round_no);
  }

  /* 4 x parameters: dense fp32 bytes of one update, from compression_vs_dense. */
  function denseUpdateBytes(rows) {
    for (let i = rows.length - 1; i >= 0; i--) {
      const r = rows[i];
      if (r.compression_vs_dense != null && r.bytes_up > 0 && r.reported > 0)
        return Math.round(r.compression_vs_dense * r.bytes_up / r.reported);
    }
    return null;
  }

  function render(task) {
    const rows = mergedRounds();
    const d4 = denseUpdateBytes(rows);
    renderTask(task, rows, d4);
    renderCurrent(task);
    renderCharts(rows, d4);
    renderRoundsTable(rows);
    renderModels(task, rows);
    renderDevices();
  }

  function renderTask(task, rows, d4) {
    const closed = rows.filter((r) => r.state === 'closed').length;
    const abandoned = rows.filter((r) => r.state === 'abandoned').length;
    let up = 0, dense = 0;
    for (const r of rows) {
      up += r.bytes_up || 0;
      if (d4 != null) dense += (r.reported || 0) * d4;
    }
    const evaluated = rows.filter((r) => r.model_metrics);
    const last = evaluated.length ? evaluated[evaluated.length - 1] : null;
    setK('task.name', task.name);
    setK('task.task_id', task.task_id);
    setK('task.aggregator', task.aggregator);
    setK('task.model_version', task.model_version);
    setK('task.state', task.finished ? 'finished' : task.round_open ? 'running' : 'waiting',
      task.finished ? 'finished' : task.round_open ? 'running' : 'waiting');
    setK('task.rounds', rows.length, closed + ' closed, ' + abandoned + ' abandoned, ' +
      (rows.length - closed - abandoned) + ' open');
    setK('task.params', d4 == null ? null : d4 / 4, d4 == null ? dash : fmtInt(d4 / 4));
    setK('task.bytes_up', up, fmtBytes(up));
    setK('task.dense_up', d4 == null ? null : dense,
      d4 == null ? dash : fmtBytes(dense) + (up > 0 ? ' (' + fmtRatio(dense / up) + ')' : ''));
    setK('task.accuracy', last ? last.model_metrics.accuracy : null,
      last ? fmtPct(last.model_metrics.accuracy) + ' (v' + last.model_version + ')' : dash);
    const a = $('#export-latest');
    exportLink(a, task.task_id, task.model_version, 'safetensors');
    a.textContent = 'Export v' + task.model_version + ' (safetensors)';
  }

  function currentRound() {
    const t = st.task;
    if (!t || !t.round) return null;
    return Object.assign({}, t.round, st.details.get(t.round.round_id) || {});
  }

  function renderCurrent(task) {
    const r = currentRound();
    const keys = ['round_no', 'selected', 'checked_in', 'downloading', 'training', 'reported', 'dropped',
      'late', 'rejected', 'target', 'quorum'];
    if (!r) {
      for (const k of keys) setK('cur.' + k, null);
      setK('cur.state', null, 'no round yet');
      return;
    }
    for (const k of keys) setK('cur.' + k, r[k], fmtInt(r[k]));
    setK('cur.state', r.state, task.finished ? 'finished' : r.state);
    $('[data-k="cur.state"]').className = 'badge ' + r.state;
    setK('cur.reported_of', r.reported, fmtInt(r.reported));
    const fill = $('#quorum-fill');
    const target = Math.max(1, r.target);
    fill.style.width = Math.min(100, 100 * r.reported / target) + '%';
    fill.classList.toggle('met', r.reported >= r.quorum);
    $('#quorum-mark').style.left = Math.min(100, 100 * r.quorum / target) + '%';
    tick();
  }

  function tick() {
    const r = currentRound();
    const label = $('#deadline-label');
    if (!r) { setK('cur.deadline', null); return; }
    const now = Date.now() + st.offsetMs;
    if (r.state === 'selecting' || r.state === 'training') {
      const at = r.state === 'selecting' ? r.select_deadline_ms : r.report_deadline_ms;
      label.textContent = r.state === 'selecting' ? 'selection closes in' : 'report deadline in';
      setK('cur.deadline', Math.max(0, at - now), fmtDur(Math.max(0, at - now)));
    } else {
      label.textContent = r.closed_at_ms ? 'ended' : 'state';
      setK('cur.deadline', r.closed_at_ms, r.closed_at_ms ? fmtTime(r.closed_at_ms) : r.state);
    }
  }

  /* ---- charts (inline SVG) ------------------------------------------------------- */
  const { chart, niceMax } = window.StarlingCharts; /* charts.js */

  function accDomain(values) {
    if (!values.length) return { lo: 0, hi: 1 };
    const lo = Math.max(0, Math.floor((Math.min(...values) - 0.05) * 10) / 10);
    const hi = Math.min(1, Math.ceil((Math.max(...values) + 0.05) * 10) / 10);
    return { lo, hi: hi > lo ? hi : lo + 0.1 };
  }

  function renderCharts(rows, d4) {
    const pct = (v) => Math.round(v * 100) + '%';
    const rn = (v) => String(v);
    /* accuracy by round: the evaluator's test accuracy of the version each round made,
       and the devices' own (sample-weighted) accuracy on the round's base version */
    const evalPts = rows.filter((r) => r.model_metrics)
      .map((r) => [r.round_no, r.model_metrics.accuracy, 'round ' + r.round_no + ' \u2192 v' + r.model_version + ': ' + fmtPct(r.model_metrics.accuracy)]);
    const devPts = rows.filter((r) => r.mean_accuracy != null)
      .map((r) => [r.round_no, r.mean_accuracy, 'round ' + r.round_no + ' devices: ' + fmtPct(r.mean_accuracy)]);
    const accs = evalPts.concat(devPts).map((p) => p[1]);
    const rounds = rows.map((r) => r.round_no);
    const rlo = rounds.length ? Math.min(...rounds) : 0, rhi = rounds.length ? Math.max(...rounds) : 1;
    chart($('[data-chart="acc-round"]'), {
      x: { lo: rlo, hi: rhi, fmt: rn, label: 'round' },
      y: Object.assign(accDomain(accs), { fmt: pct }),
      series: [
        { key: 'evaluator', name: 'test set (evaluator)', color: COLORS.eval, kind: 'line', pts: evalPts },
        { key: 'devices', name: 'devices (mean)', color: COLORS.device, kind: 'line', dashed: true, pts: devPts },
      ],
      empty: 'no evaluator metrics yet',
    });
    /* accuracy by cumulative upload bytes (every round's uploads count, abandoned too) */
    let cum = 0;
    const bytePts = [];
    for (const r of rows) {
      cum += r.bytes_up || 0;
      if (r.model_metrics) bytePts.push([cum, r.model_metrics.accuracy, fmtBytes(cum) + ': ' + fmtPct(r.model_metrics.accuracy)]);
    }
    chart($('[data-chart="acc-bytes"]'), {
      x: { lo: 0, hi: Math.max(1, cum), fmt: fmtBytes, label: 'cumulative upload bytes' },
      y: Object.assign(accDomain(bytePts.map((p) => p[1])), { fmt: pct }),
      series: [{ key: 'evaluator', name: 'test set (evaluator)', color: COLORS.eval, kind: 'line', pts: bytePts }],
      empty: 'no evaluator metrics yet',
    });
    /* participation per round */
    const counts = (k) => rows.map((r) => [r.round_no, r[k] || 0, 'round ' + r.round_no + ': ' + (r[k] || 0) + ' ' + k]);
    const maxCount = Math.max(1, ...rows.map((r) => Math.max(r.reported || 0, r.dropped || 0, r.late || 0)));
    chart($('[data-chart="participation"]'), {
      x: { band: rounds, fmt: rn, label: 'round' },
      y: { lo: 0, hi: niceMax(Math.max(4, maxCount)), fmt: (v) => String(v) },
      series: [
        { key: 'reported', name: 'reported', color: COLORS.reported, kind: 'bar', pts: counts('reported') },
        { key: 'dropped', name: 'dropped', color: COLORS.dropped, kind: 'bar', pts: counts('dropped') },
        { key: 'late', name: 'late', color: COLORS.late, kind: 'bar', pts: counts('late') },
      ],
    });
    /* bytes per round, log scale, beside what dense fp32 FedAvg would move */
    const bytes = (k) => rows.map((r) => [r.round_no, r[k] || 0, 'round ' + r.round_no + ': ' + fmtBytes(r[k] || 0) + ' ' + k.replace('bytes_', '')]);
    const denseUp = d4 == null ? [] : rows.filter((r) => r.reported > 0)
      .map((r) => [r.round_no, r.reported * d4, 'round ' + r.round_no + ': dense up ' + fmtBytes(r.reported * d4)]);
    const denseDown = d4 == null ? [] : rows.filter((r) => r.selected > 0)
      .map((r) => [r.round_no, r.selected * d4, 'round ' + r.round_no + ': dense down ' + fmtBytes(r.selected * d4)]);
    const all = bytes('bytes_up').concat(bytes('bytes_down'), denseUp, denseDown).map((p) => p[1]).filter((v) => v > 0);
    const lo = all.length ? Math.pow(10, Math.floor(Math.log10(Math.min(...all)))) : 1;
    const hi = all.length ? Math.pow(10, Math.ceil(Math.log10(Math.max(...all) * 1.0001))) : 10;
    chart($('[data-chart="bytes"]'), {
      x: { band: rounds, fmt: rn, label: 'round' },
      y: { lo, hi: hi > lo ? hi : lo * 10, log: true, fmt: fmtBytes },
      series: [
        { key: 'bytes_up', name: 'up', color: COLORS.up, kind: 'bar', pts: bytes('bytes_up') },
        { key: 'bytes_down', name: 'down', color: COLORS.down, kind: 'bar', pts: bytes('bytes_down') },
        { key: 'dense_up', name: 'dense up', color: COLORS.dense, kind: 'line', dashed: true, pts: denseUp },
        { key: 'dense_down', name: 'dense down', color: '#c3a6ee', kind: 'line', dashed: true, pts: denseDown },
      ],
    });
  }

  /* ---- tables --------------------------------------------------------------------- */
  /* the round's federated evaluation: the selected devices' figures of the base version on
     their held-out samples (sample-weighted); accuracy, or RMSE for a regression task */
  function fedEval(k, r) {
    const ev = r.evaluation;
    let c;
    if (r.mean_accuracy != null || !ev || ev.rmse == null) {
      c = td(k('mean_accuracy'), r.mean_accuracy == null ? null : r.mean_accuracy, fmtPct(r.mean_accuracy));
    } else {
      c = td(k('eval_rmse'), ev.rmse, 'RMSE ' + ev.rmse.toPrecision(4));
    }
    if (ev && ev.devices > 0) {
      c.title = ev.devices + ' device' + (ev.devices === 1 ? '' : 's') + ', ' + fmtInt(ev.samples) +
        ' held-out samples, loss ' + (ev.loss == null ? dash : ev.loss.toFixed(4));
    }
    return c;
  }

  function renderRoundsTable(rows) {
    const tb = $('#rounds tbody');
    const frag = document.createDocumentFragment();
    const now = Date.now() + st.offsetMs;
    for (const r of rows.slice(-TABLE_ROWS).reverse()) {
      const k = (f) => 'round.' + r.round_no + '.' + f;
      const tr = document.createElement('tr');
      tr.dataset.round = String(r.round_no);
      tr.title = 'round ' + r.round_no + ' (id ' + r.round_id + '), opened ' + fmtTime(r.opened_at_ms) +
        (r.closed_at_ms > 0 ? ', ended ' + fmtTime(r.closed_at_ms) : '');
      if (!isFinal(r.state)) tr.className = 'open';
      const reasons = r.rejected_by_reason ? Object.entries(r.rejected_by_reason).filter((e) => e[1] > 0)
        .map((e) => e[0] + ' ' + e[1]).join(', ') : '';
      const rej = td(k('rejected'), r.rejected, fmtInt(r.rejected));
      if (reasons) rej.title = reasons;
      const end = r.closed_at_ms > 0 ? r.closed_at_ms : now;
      tr.append(
        td(k('round_no'), r.round_no),
        td(k('state'), r.state, r.state, 'text'),
        td(k('model_version'), r.model_version == null ? null : r.model_version,
          'v' + r.base_version + (r.model_version != null ? ' \u2192 v' + r.model_version : '')),
        td(k('selected'), r.selected, fmtInt(r.selected)),
        /* the engine counts check-ins of the open round only; an ended round's 0 means "not kept" */
        td(k('checked_in'), r.checked_in == null ? null : r.checked_in,
          isFinal(r.state) && !r.checked_in ? dash : fmtInt(r.checked_in)),
        td(k('reported'), r.reported, fmtInt(r.reported) + ' / ' + fmtInt(r.target)),
        td(k('quorum'), r.quorum, fmtInt(r.quorum)),
        td(k('dropped'), r.dropped, fmtInt(r.dropped)),
        td(k('late'), r.late, fmtInt(r.late)),
        rej,
        td(k('bytes_up'), r.bytes_up, fmtBytes(r.bytes_up)),
        td(k('bytes_down'), r.bytes_down, fmtBytes(r.bytes_down)),
        td(k('compression_vs_dense'), r.compression_vs_dense == null ? null : r.compression_vs_dense,
          fmtRatio(r.compression_vs_dense)),
        td(k('time_to_quorum_ms'), r.time_to_quorum_ms == null ? null : r.time_to_quorum_ms,
          r.time_to_quorum_ms == null || r.time_to_quorum_ms < 0 ? dash : fmtDur(r.time_to_quorum_ms)),
        fedEval(k, r),
        td(k('test_accuracy'), r.model_metrics ? r.model_metrics.accuracy : null,
          fmtPct(r.model_metrics ? r.model_metrics.accuracy : null)),
        td(null, null, fmtDur(end - r.opened_at_ms)),
        td(k('error'), r.error || '', r.error || '', 'text note'));
      frag.appendChild(tr);
    }
    tb.textContent = '';
    tb.appendChild(frag);
  }

  function exportLink(a, task, version, format) {
    a.href = '/v1/models/' + version + '?task=' + task + (format === 'safetensors' ? '&format=safetensors' : '');
    a.dataset.file = 'task' + task + '-v' + version + (format === 'safetensors' ? '.safetensors' : '.frame');
    a.dataset.export = format;
  }

  function renderModels(task, rows) {
    const tb = $('#models tbody');
    const byVersion = new Map();
    for (const r of rows) if (r.model_version != null) byVersion.set(r.model_version, r);
    tb.textContent = '';
    for (let v = task.model_version; v >= 1 && v > task.model_version - VERSIONS_SHOWN; v--) {
      const r = byVersion.get(v);
      const m = r && r.model_metrics;
      const tr = document.createElement('tr');
      tr.dataset.version = String(v);
      const links = document.createElement('td');
      for (const f of ['safetensors', 'frame']) {
        const a = document.createElement('a');
        exportLink(a, task.task_id, v, f);
        a.textContent = f;
        links.append(a, ' ');
      }
      tr.append(td('model.' + v + '.version', v, 'v' + v),
        td('model.' + v + '.round', r ? r.round_no : null, v === 1 ? 'initial' : r ? String(r.round_no) : dash),
        td('model.' + v + '.accuracy', m ? m.accuracy : null, fmtPct(m ? m.accuracy : null)),
        td('model.' + v + '.loss', m ? m.loss : null, m ? m.loss.toFixed(4) : dash), links);
      tb.appendChild(tr);
    }
  }

  /* what a device refuses and why: its model limits, or "no usable data: ..." */
  function refusalCell(k, d) {
    const list = d.refusals || [];
    const text = list.map((r) => 'task ' + r.task_id + ': ' + r.reason).join('; ');
    const c = td(k('refusals'), list.length, list.length ? text : '', 'text note');
    if (list.length) c.title = text;
    return c;
  }

  function renderDevices() {
    const tb = $('#devices tbody');
    tb.textContent = '';
    for (const d of st.devices) {
      const tr = document.createElement('tr');
      const k = (f) => 'device.' + d.device_id + '.' + f;
      tr.append(td(k('id'), d.device_id),
        td(k('enrolled_at_ms'), d.enrolled_at_ms, fmtTime(d.enrolled_at_ms)),
        td(k('last_seen_ms'), d.last_seen_ms, fmtAgo(d.last_seen_ms)),
        td(k('participations'), d.participations, fmtInt(d.participations)),
        td(k('reported'), d.reported, fmtInt(d.reported)),
        td(k('rejected'), d.rejected, fmtInt(d.rejected)),
        td(k('late'), d.late, fmtInt(d.late)),
        td(k('state'), d.state, d.state, 'text'),
        refusalCell(k, d));
      tb.appendChild(tr);
    }
    $('#devices-note').textContent = st.devicesTotal > st.devices.length
      ? 'The first ' + st.devices.length + ' of ' + fmtInt(st.devicesTotal) + ' devices.'
      : fmtInt(st.devices.length) + ' device' + (st.devices.length === 1 ? '' : 's') + ' enrolled.';
  }

  /* ---- start ----------------------------------------------------------------------- */
  function start() {
    const snap = $('#snapshot'); /* the server-rendered tables, for browsers without JS */
    if (snap) snap.remove();
    const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (m) {
      st.token = decodeURIComponent(m[1]);
      try { sessionStorage.setItem(TOKEN_KEY, st.token); } catch (_) { /* storage disabled */ }
      history.replaceState(null, '', location.pathname + location.search);
    } else {
      try { st.token = sessionStorage.getItem(TOKEN_KEY) || ''; } catch (_) { st.token = ''; }
    }
    $('#login-form').addEventListener('submit', (e) => {
      e.preventDefault();
      st.token = $('#token-input').value.trim();
      $('#token-input').value = '';
      try { sessionStorage.setItem(TOKEN_KEY, st.token); } catch (_) { /* kept in memory only */ }
      poll();
    });
    $('#logout').addEventListener('click', () => {
      try { sessionStorage.removeItem(TOKEN_KEY); } catch (_) { /* nothing kept */ }
      st.token = '';
      clearTimeout(st.timer);
      showLogin('');
    });
    $('#task-select').addEventListener('change', (e) => {
      st.taskId = Number(e.target.value);
      poll();
    });
    document.addEventListener('click', (e) => {
      const a = e.target.closest && e.target.closest('a[data-export]');
      if (a) download(e, a);
    });
    document.addEventListener('visibilitychange', () => { if (!document.hidden && st.timer) poll(); });
    setInterval(tick, 1000);
    poll();
  }

  /* Exports go through fetch so the Bearer token goes along, then to a file. */
  async function download(ev, a) {
    ev.preventDefault();
    try {
      const r = await fetch(a.getAttribute('href'), { headers: authHeaders() });
      if (r.status === 401) {
        showLogin('Exporting ' + (a.dataset.export === 'frame' ? 'a frame' : 'a model') + ' needs the admin token.');
        return;
      }
      if (!r.ok) throw new HttpError(r.status, r.status === 404 ? 'this version is no longer kept' : '');
      const url = URL.createObjectURL(await r.blob());
      const tmp = document.createElement('a');
      tmp.href = url;
      tmp.download = a.dataset.file;
      document.body.appendChild(tmp);
      tmp.click();
      tmp.remove();
      setTimeout(() => URL.revokeObjectURL(url), 30000);
    } catch (e) {
      banner('export failed: ' + e.message);
    }
  }

  start();
})();
