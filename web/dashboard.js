// baton's dashboard: one plain script, no build step. It polls the daemon's read-only routes
// once a second (the job list, the chosen job's status, its history from the `since` cursor,
// its log from the last offset) with the token of the page's URL as a Bearer credential, and
// draws with uPlot (embedded in the binary, like this file). Every field may be null or absent:
// a job with no sample or no loss yet shows "none yet", never an error.
'use strict';

(() => {
  const POLL_MS = 1000;
  const LOG_KEEP = 64 * 1024; // characters of log tail kept on the page
  const MiB = 1024 * 1024;
  const COLORS = ['#2d6cdf', '#16a085', '#8e44ad', '#d35400', '#27ae60', '#c0392b', '#2980b9',
    '#7f8c8d', '#f39c12', '#1abc9c'];

  const token = new URLSearchParams(location.search).get('token') || '';
  const $ = (id) => document.getElementById(id);

  // What the page knows of the chosen job; reset when another job is chosen.
  let job = null;
  let selected = new URLSearchParams(location.hash.slice(1)).get('job');
  let charts = { rss: null, loss: null, rssKey: '', lossKey: '' };

  function freshJob(id) {
    return { id, cursor: 0, rss: new Map(), progress: new Map(), events: [], status: null,
      logOffset: null, log: '' };
  }

  // ----- formatting ------------------------------------------------------------------------
  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
  function fmtMiB(bytes) {
    const b = num(bytes);
    return b === null ? '–' : (b / MiB).toFixed(b < 10 * MiB ? 1 : 0) + ' MiB';
  }
  function fmtLeak(bps) {
    const b = num(bps);
    return b === null ? 'not enough samples' : (b / MiB).toFixed(2) + ' MiB/step';
  }
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  // ----- the API ---------------------------------------------------------------------------
  async function api(path) {
    const res = await fetch(path, { headers: { Authorization: 'Bearer ' + token },
      cache: 'no-store' });
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (!res.ok) {
      const why = body && typeof body.error === 'string' ? body.error : res.statusText;
      const err = new Error(res.status + ': ' + why);
      err.status = res.status;
      throw err;
    }
    return body || {};
  }

  // ----- the job list ----------------------------------------------------------------------
  function budgetCell(j) {
    const td = el('td');
    const rss = num(j.rss_bytes);
    const limitMiB = num(j.hard_limit_mib) ?? num(j.soft_limit_mib);
    if (rss === null || rss === 0) {
      td.textContent = '–';
      return td;
    }
    const bar = el('span', null, 'bar');
    const fill = el('span');
    if (limitMiB) {
      const frac = rss / (limitMiB * MiB);
      fill.style.width = Math.min(100, frac * 100).toFixed(1) + '%';
      const soft = num(j.soft_limit_mib);
      if (soft && rss > soft * MiB) bar.classList.add('hot');
      if (frac >= 1) bar.classList.add('over');
    }
    bar.appendChild(fill);
    td.appendChild(bar);
    const parts = [fmtMiB(rss)];
    if (num(j.soft_limit_mib)) parts.push('soft ' + j.soft_limit_mib + ' MiB');
    if (num(j.hard_limit_mib)) parts.push('hard ' + j.hard_limit_mib + ' MiB');
    td.appendChild(document.createTextNode(parts.join(' / ')));
    return td;
  }

  function renderJobs(list) {
    const tbody = $('jobs').querySelector('tbody');
    tbody.replaceChildren();
    $('no-jobs').hidden = list.length > 0;
    for (const j of list) {
      const tr = el('tr');
      tr.dataset.id = j.id;
      if (j.id === selected) tr.classList.add('selected');
      tr.appendChild(el('td', j.name ? j.name + ' (' + j.id + ')' : j.id));
      tr.appendChild(el('td', j.state ?? '?', 'state-' + (j.state ?? '')));
      const step = num(j.step) ?? 0;
      const total = num(j.total_steps);
      tr.appendChild(el('td', total ? step + ' / ' + total + ' (' +
        Math.floor((100 * step) / total) + '%)' : String(step)));
      tr.appendChild(budgetCell(j));
      tr.appendChild(el('td', num(j.workers) ?? 0));
      tr.addEventListener('click', () => choose(j.id));
      tbody.appendChild(tr);
    }
  }

  function choose(id) {
    if (id === selected && job) return;
    selected = id;
    history.replaceState(null, '', location.pathname + location.search + '#job=' +
      encodeURIComponent(id));
    job = freshJob(id);
    destroyCharts();
    $('log').textContent = '';
  }

  // ----- history ---------------------------------------------------------------------------
  function absorbHistory(h) {
    const next = num(h.next) ?? job.cursor;
    if (next < job.cursor) { // the history started over (its file was lost): from 0 again
      const id = job.id;
      job = freshJob(id);
      return false;
    }
    for (const r of h.rss || []) {
      const shard = num(r.shard) ?? 0;
      if (!job.rss.has(shard)) job.rss.set(shard, { pid: r.pid, points: [] });
      const t = num(r.t_ms);
      const b = num(r.bytes);
      if (t !== null && b !== null) job.rss.get(shard).points.push([t / 1000, b / MiB]);
    }
    for (const p of h.progress || []) {
      const step = num(p.step);
      if (step === null) continue;
      const m = p.metrics && typeof p.metrics === 'object' ? p.metrics : {};
      job.progress.set(step, { loss: num(p.loss), acc: num(m.accuracy ?? m.acc) });
    }
    for (const e of h.events || []) job.events.push(e);
    job.cursor = next;
    return true;
  }

  // ----- charts ----------------------------------------------------------------------------
  function destroyCharts() {
    if (charts.rss) charts.rss.destroy();
    if (charts.loss) charts.loss.destroy();
    charts = { rss: null, loss: null, rssKey: '', lossKey: '' };
  }

  function chartWidth(box) {
    return Math.max(320, Math.min(1160, box.clientWidth || document.body.clientWidth - 40));
  }

  // Worker ends (recycles, crashes, stops) as dashed vertical lines labelled with their cause.
  const ENDS = new Set(['recycle', 'crash', 'stop', 'completed', 'cancel']);
  function boundaries() {
    return job.events.filter((e) => ENDS.has(e.kind) && num(e.t_ms) !== null);
  }
  function drawBoundaries(u) {
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    ctx.save();
    ctx.font = Math.round(10 * devicePixelRatio) + 'px system-ui, sans-serif';
    ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
    for (const e of boundaries()) {
      const x = u.valToPos(e.t_ms / 1000, 'x', true);
      if (!(x >= left && x <= left + width)) continue;
      ctx.strokeStyle = e.kind === 'crash' ? '#c62828' : '#7f8c8d';
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      ctx.fillStyle = ctx.strokeStyle;
      ctx.fillText(e.cause || e.kind, x + 3 * devicePixelRatio, top + 12 * devicePixelRatio);
    }
    ctx.restore();
  }

  function limitsMiB() {
    const s = job.status || {};
    return { soft: num(s.soft_limit_mib), hard: num(s.hard_limit_mib) };
  }

  function rssData() {
    const shards = [...job.rss.keys()].sort((a, b) => a - b);
    const xs = [...new Set(shards.flatMap((k) => job.rss.get(k).points.map((p) => p[0])))]
      .sort((a, b) => a - b);
    const index = new Map(xs.map((x, i) => [x, i]));
    const data = [xs];
    for (const k of shards) {
      const ys = new Array(xs.length).fill(null);
      for (const [x, y] of job.rss.get(k).points) ys[index.get(x)] = y;
      data.push(ys);
    }
    const { soft, hard } = limitsMiB();
    if (soft !== null) data.push(xs.map(() => soft));
    if (hard !== null) data.push(xs.map(() => hard));
    return { shards, data, soft, hard };
  }

  function drawRss() {
    const box = $('rss-chart');
    const { shards, data, soft, hard } = rssData();
    $('rss-empty').hidden = data[0].length > 0;
    const key = shards.join(',') + '|' + soft + '|' + hard;
    if (data[0].length === 0) return;
    if (charts.rss && charts.rssKey === key) {
      charts.rss.setData(data);
    } else {
      if (charts.rss) charts.rss.destroy();
      const series = [{ label: 'time' }];
      shards.forEach((k, i) => series.push({
        label: 'worker ' + (k + 1) + ' (pid ' + (job.rss.get(k).pid ?? '?') + ')',
        stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false,
        value: (u, v) => (v === null ? '–' : v.toFixed(1) + ' MiB'),
      }));
      if (soft !== null) series.push({ label: 'soft limit', stroke: '#b26a00', dash: [6, 4], width: 1.5 });
      if (hard !== null) series.push({ label: 'hard limit', stroke: '#c62828', dash: [6, 4], width: 1.5 });
      const top = Math.max(soft ?? 0, hard ?? 0);
      charts.rss = new uPlot({
        width: chartWidth(box), height: 280,
        scales: { x: { time: true },
          y: { range: (u, min, max) => [0, Math.max(max ?? 0, top) * 1.08 || 1] } },
        series,
        axes: [{}, { size: 70, values: (u, vals) => vals.map((v) => v + ' MiB') }],
        hooks: { draw: [drawBoundaries] },
      }, data, box);
      charts.rssKey = key;
    }
    const ul = $('boundaries');
    ul.replaceChildren();
    for (const e of boundaries()) {
      ul.appendChild(el('li', 'worker ' + ((num(e.shard) ?? 0) + 1) + ' ended at step ' +
        (num(e.step) ?? '?') + ': ' + (e.cause || e.kind)));
    }
  }

  function drawLoss() {
    const box = $('loss-chart');
    const steps = [...job.progress.keys()].sort((a, b) => a - b);
    const loss = steps.map((s) => job.progress.get(s).loss);
    const acc = steps.map((s) => job.progress.get(s).acc);
    const hasLoss = loss.some((v) => v !== null);
    const hasAcc = acc.some((v) => v !== null);
    $('loss-empty').hidden = hasLoss || hasAcc;
    $('acc-title').hidden = !hasAcc;
    if (!hasLoss && !hasAcc) return;
    const data = [steps, loss];
    if (hasAcc) data.push(acc);
    const key = hasAcc ? 'acc' : 'loss';
    if (charts.loss && charts.lossKey === key) {
      charts.loss.setData(data);
      return;
    }
    if (charts.loss) charts.loss.destroy();
    const series = [{ label: 'step' }, { label: 'loss', stroke: '#2d6cdf', width: 1.5, scale: 'loss' }];
    const axes = [{}, { scale: 'loss', size: 60 }];
    if (hasAcc) {
      series.push({ label: 'accuracy', stroke: '#27ae60', width: 1.5, scale: 'acc' });
      axes.push({ scale: 'acc', side: 1, grid: { show: false }, size: 50 });
    }
    charts.loss = new uPlot({
      width: chartWidth(box), height: 220,
      scales: { x: { time: false }, loss: {}, acc: { range: [0, 1] } },
      series, axes,
    }, data, box);
    charts.lossKey = key;
  }

  // ----- the job's status, shards and log --------------------------------------------------
  function renderStatus() {
    const s = job.status || {};
    $('job').hidden = false;
    $('job-title').textContent = (s.name ? s.name + ' ' : '') + '(' + job.id + '): ' + (s.state ?? '?');
    const live = s.live && typeof s.live === 'object' ? s.live : null;
    const bits = [];
    const step = num(live?.step) ?? num(s.step) ?? 0;
    const total = num(s.total_steps);
    bits.push('step ' + step + (total ? ' of ' + total : ''));
    if (live && num(live.loss) !== null) bits.push('loss ' + live.loss.toFixed(4));
    bits.push('peak RSS ' + fmtMiB(s.peak_rss_bytes));
    bits.push('leak ' + fmtLeak(s.leak_bytes_per_step));
    if (s.diagnosis) bits.push(s.diagnosis);
    $('job-summary').textContent = bits.join(' · ');

    const tbody = $('shards').querySelector('tbody');
    tbody.replaceChildren();
    for (const sh of Array.isArray(s.shards) ? s.shards : []) {
      const tr = el('tr');
      tr.appendChild(el('td', (num(sh.index) ?? 0) + 1));
      tr.appendChild(el('td', sh.pid ?? '–'));
      // The newest shard of a running job is still going: its end and leak are not known yet.
      const going = !sh.cause && s.state === 'running' && sh === s.shards[s.shards.length - 1];
      const end = going ? (num(live?.step) ?? '…') + ' …' : (num(sh.end_step) ?? '–');
      tr.appendChild(el('td', (num(sh.start_step) ?? 0) + ' → ' + end));
      tr.appendChild(el('td', num(sh.peak_rss_bytes) ? fmtMiB(sh.peak_rss_bytes) : '–'));
      tr.appendChild(el('td', going ? fmtLeak(s.leak_bytes_per_step) : fmtLeak(sh.leak_bytes_per_step)));
      tr.appendChild(el('td', sh.cause ?? (s.state === 'running' ? 'running' : '–')));
      tr.appendChild(el('td', sh.detail ?? ''));
      tbody.appendChild(tr);
    }
  }

  async function pollLog() {
    const base = '/v1/jobs/' + encodeURIComponent(job.id) + '/logs';
    if (job.logOffset === null) {
      // First look: only the tail, however long the log is.
      const head = await api(base + '?offset=0');
      const size = num(head.size) ?? 0;
      job.logOffset = Math.max(0, size - LOG_KEEP);
      if (job.logOffset === 0) {
        job.log = String(head.data ?? '');
        job.logOffset = num(head.next_offset) ?? 0;
        return;
      }
    }
    const chunk = await api(base + '?offset=' + job.logOffset);
    job.log = (job.log + String(chunk.data ?? '')).slice(-LOG_KEEP);
    job.logOffset = num(chunk.next_offset) ?? job.logOffset;
  }

  function renderLog() {
    const pre = $('log');
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    if (pre.textContent !== job.log) {
      pre.textContent = job.log || '(no output yet)';
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
  }

  // ----- the loop --------------------------------------------------------------------------
  async function poll() {
    const conn = $('conn');
    try {
      const list = (await api('/v1/jobs')).jobs;
      const jobs = Array.isArray(list) ? list : [];
      if (!selected || !jobs.some((j) => j.id === selected)) {
        const running = jobs.find((j) => j.state === 'running');
        const pick = running || jobs[jobs.length - 1];
        if (pick) choose(pick.id);
      } else if (!job) {
        job = freshJob(selected);
      }
      renderJobs(jobs);
      if (job) {
        const id = encodeURIComponent(job.id);
        job.status = await api('/v1/jobs/' + id);
        if (!absorbHistory(await api('/v1/jobs/' + id + '/history?since=' + job.cursor))) {
          destroyCharts();
        }
        await pollLog();
        renderStatus();
        drawRss();
        drawLoss();
        renderLog();
      }
      $('error').hidden = true;
      conn.textContent = 'live · updated ' + new Date().toLocaleTimeString();
      conn.classList.remove('bad');
    } catch (e) {
      conn.textContent = 'not connected';
      conn.classList.add('bad');
      const err = $('error');
      err.hidden = false;
      err.textContent = e.status === 401 || e.status === 403
        ? 'The daemon refused the token (' + e.message + '). Open the URL `baton serve` printed ' +
          'at start: dashboard on http://127.0.0.1:PORT/?token=...'
        : 'Cannot reach the baton daemon: ' + e.message;
      if (e.status === 401 || e.status === 403) return; // a new token needs a new URL
    }
    setTimeout(poll, POLL_MS);
  }

  // What the page shows, in numbers: for the dashboard test and for anyone at the console.
  window.batonDashboard = Object.freeze({
    summary() {
      const rssSeries = charts.rss ? charts.rss.series.slice(1).map((s, i) => ({
        label: s.label,
        points: charts.rss.data[i + 1].filter((v) => v !== null && v !== undefined).length,
      })) : [];
      const lossPoints = charts.loss
        ? charts.loss.data[1].filter((v) => v !== null && v !== undefined).length : 0;
      const shards = job && job.status && Array.isArray(job.status.shards) ? job.status.shards : [];
      return { job: job ? job.id : null, cursor: job ? job.cursor : 0, workers: shards.length,
        rssSeries, lossPoints,
        boundaries: job ? boundaries().length : 0, logChars: job ? job.log.length : 0,
        error: $('error').hidden ? null : $('error').textContent };
    },
  });

  window.addEventListener('resize', () => {
    for (const [name, c] of [['rss-chart', charts.rss], ['loss-chart', charts.loss]]) {
      if (c) c.setSize({ width: chartWidth($(name)), height: c.height });
    }
  });

  if (!token) {
    const err = $('error');
    err.hidden = false;
    err.textContent = 'This page needs its token: open the URL `baton serve` printed at start ' +
      '(dashboard on http://127.0.0.1:PORT/?token=...).';
    $('conn').textContent = 'no token';
    $('conn').classList.add('bad');
  } else {
    poll();
  }
})();
