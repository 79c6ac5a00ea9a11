// The status page: reads tally's own JSON (/v1/status, /v1/status/history,
// /v1/status/hot-posts, /v1/cluster) every 2 s while the page is visible
// and draws it. It keeps what it has drawn in data attributes (the points
// of each plot, the member rows) so that a test can read them off the DOM.
'use strict';

const POLL_MS = 2000;
const KEEP = 900;  // 15 minutes of one-second samples

const hist = {
  t: [],
  cols: {},
  partitions: []
};
const COLUMNS = [
  'routed', 'applied', 'dead_letters', 'lag', 'freshness_ms', 'http', 'http_p99_ms', 'commit_p99_ms'
];
let lastT = 0;
let self = '';
const charts = {};

function $(id) {
  return document.getElementById(id);
}

function fmtNum(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(1) + 'k';
  return v.toFixed(digits || 0);
}

function fmtMs(v) {
  if (v === null || v === undefined) return '–';
  return v >= 10000 ? (v / 1000).toFixed(1) + ' s' : Math.round(v) + ' ms';
}

function fmtUptime(s) {
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  if (d > 0) return d + 'd ' + h + 'h';
  if (h > 0) return h + 'h ' + m + 'm';
  return m + 'm ' + (s % 60) + 's';
}

async function getJson(path) {
  const r = await fetch(path, {cache: 'no-store'});
  if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
  return r.json();
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

// --- history ---------------------------------------------------------------

function mergeHistory(h) {
  const n = h.t.length;
  for (let i = 0; i < n; i++) {
    hist.t.push(h.t[i]);
    for (const c of COLUMNS) (hist.cols[c] = hist.cols[c] || []).push(h[c][i]);
  }
  // Per-partition columns: replaced when the set changes, else appended.
  const same = h.partitions.length === hist.partitions.length &&
      h.partitions.every(
          (p, i) =>
              p.topic === hist.partitions[i].topic && p.partition === hist.partitions[i].partition);
  if (!same) {
    const pad = hist.t.length - n;
    hist.partitions = h.partitions.map(p => ({
                                         topic: p.topic,
                                         partition: p.partition,
                                         lag: new Array(pad).fill(null).concat(p.lag)
                                       }));
  } else {
    h.partitions.forEach((p, i) => {
      hist.partitions[i].lag.push(...p.lag);
    });
  }
  const drop = hist.t.length - KEEP;
  if (drop > 0) {
    hist.t.splice(0, drop);
    for (const c of COLUMNS) hist.cols[c].splice(0, drop);
    for (const p of hist.partitions) p.lag.splice(0, drop);
  }
  if (n > 0) lastT = h.t[n - 1];
}

function rows(names) {
  return hist.t.map((t, i) => [new Date(t)].concat(names.map(c => hist.cols[c][i])));
}

const CHARTS = [
  {
    id: 'chart-throughput',
    cols: ['routed', 'applied'],
    labels: ['events routed/s', 'deltas applied/s'],
    colors: ['#2f6fde', '#1f9d55']
  },
  {id: 'chart-dlq', cols: ['dead_letters'], labels: ['dead letters/s'], colors: ['#d64545']},
  {id: 'chart-lag', cols: ['lag'], labels: ['lag (records)'], colors: ['#d98a00']},
  {id: 'chart-freshness', cols: ['freshness_ms'], labels: ['freshness (ms)'], colors: ['#8a4fd8']},
  {
    id: 'chart-http',
    cols: ['http', 'http_p99_ms'],
    labels: ['requests/s', 'p99 ms (right)'],
    colors: ['#2f6fde', '#d64545'],
    y2: 'p99 ms (right)'
  },
  {
    id: 'chart-commit',
    cols: ['commit_p99_ms'],
    labels: ['window commit p99 (ms)'],
    colors: ['#1f9d55']
  },
];

// Axis numbers: 0.25, 12, 4.5k, 1.2M (never "m" for milli: these are ms).
function axisNum(v) {
  if (v === null || v === undefined) return '';
  const a = Math.abs(v);
  if (a >= 1e6) return +(v / 1e6).toFixed(1) + 'M';
  if (a >= 1e3) return +(v / 1e3).toFixed(1) + 'k';
  if (a > 0 && a < 10) return String(+v.toFixed(2));
  return String(Math.round(v));
}

// Each caption names its series in their colors.
function captionCharts() {
  for (const c of CHARTS) {
    const cap = $(c.id).parentElement.querySelector('figcaption');
    cap.replaceChildren();
    c.labels.forEach((label, i) => {
      const key = el('span', {class: 'key'});
      key.append(el('i', {style: 'background:' + c.colors[i]}), document.createTextNode(label));
      cap.append(key);
    });
  }
}

function drawCharts() {
  for (const c of CHARTS) {
    const data = rows(c.cols);
    const box = $(c.id);
    // Points per series that hold a value: what the page actually plots.
    const points = c.cols.map(col => hist.cols[col].filter(v => v !== null).length);
    box.dataset.rows = String(data.length);
    box.dataset.points = points.join(',');
    if (data.length === 0) continue;
    const opts = {
      labels: ['time'].concat(c.labels),
      colors: c.colors,
      strokeWidth: 1.6,
      legend: 'follow',
      includeZero: true,
      connectSeparatedPoints: false,
      axes: {
        x: {axisLabelWidth: 60},
        y: {axisLabelWidth: 44, axisLabelFormatter: axisNum, valueFormatter: axisNum}
      },
      gridLineColor: '#eceef2',
      drawPoints: data.length < 30,
      pointSize: 1.5,
    };
    if (c.y2) {
      opts.series = {};
      opts.series[c.y2] = {axis: 'y2'};
      opts.axes.y2 = {
        axisLabelWidth: 40,
        independentTicks: true,
        axisLabelFormatter: axisNum,
        valueFormatter: axisNum
      };
    }
    if (!charts[c.id]) {
      charts[c.id] = new Dygraph(box, data, opts);
    } else {
      charts[c.id].updateOptions({file: data});
    }
    box.dataset.drawn = String(box.querySelectorAll('canvas').length > 0);
  }
}

function drawSparks() {
  const root = $('sparks');
  if (root.children.length !== hist.partitions.length) {
    root.replaceChildren();
    for (const p of hist.partitions) {
      const d = el('div', {class: 'spark'});
      const head = el('div');
      head.append(el('span', {}, p.topic + '/' + p.partition), el('b', {}, '–'));
      d.append(head, el('canvas', {width: '220', height: '30'}));
      root.append(d);
    }
  }
  hist.partitions.forEach((p, i) => {
    const box = root.children[i];
    const vals = p.lag;
    let last = null;
    for (let j = vals.length - 1; j >= 0; j--)
      if (vals[j] !== null) {
        last = vals[j];
        break;
      }
    box.querySelector('b').textContent = fmtNum(last);
    box.dataset.points = String(vals.filter(v => v !== null).length);
    const cv = box.querySelector('canvas');
    const g = cv.getContext('2d');
    g.clearRect(0, 0, cv.width, cv.height);
    const max = Math.max(1, ...vals.filter(v => v !== null));
    g.strokeStyle = last > 0 ? '#d98a00' : '#1f9d55';
    g.lineWidth = 1.2;
    g.beginPath();
    let pen = false;
    vals.forEach((v, j) => {
      if (v === null) {
        pen = false;
        return;
      }
      const x = (j / Math.max(1, vals.length - 1)) * cv.width;
      const y = cv.height - 2 - (v / max) * (cv.height - 4);
      if (pen)
        g.lineTo(x, y);
      else
        g.moveTo(x, y);
      pen = true;
    });
    g.stroke();
  });
}

// --- status, cluster, hot posts -------------------------------------------

function drawStatus(s) {
  self = s.member;
  $('version').textContent = 'v' + s.version;
  $('member').textContent = s.member || '(this process)';
  $('uptime').textContent = fmtUptime(s.uptime_s);
  $('brokers').textContent = s.brokers || '(none)';
  $('topics').textContent = s.input_topics.join(', ');
  $('partitions').textContent = String(s.partitions);
  $('state-dir').textContent = s.state_dir;
  const banner = $('banner');
  banner.replaceChildren(...s.alerts.map(a => el('div', {'data-code': a.code}, a.message)));
  banner.hidden = s.alerts.length === 0;
  document.body.dataset.alerts = s.alerts.map(a => a.code).join(',');
}

function drawNow() {
  const last = c => {
    const v = hist.cols[c] || [];
    return v.length ? v[v.length - 1] : null;
  };
  $('lag-now').textContent = fmtNum(last('lag'));
  $('fresh-now').textContent = fmtMs(last('freshness_ms'));
  $('routed-now').textContent = fmtNum(last('routed'), 0);
  $('http-now').textContent = fmtNum(last('http'), 0);
}

function partsText(list) {
  if (!list.length) return '–';
  // Runs of consecutive partitions are written a-b.
  const out = [];
  for (let i = 0; i < list.length;) {
    let j = i;
    while (j + 1 < list.length && list[j + 1] === list[j] + 1) j++;
    out.push(j > i ? list[i] + '-' + list[j] : String(list[i]));
    i = j + 1;
  }
  return out.join(', ') + '  (' + list.length + ')';
}

function drawCluster(c) {
  $('group').textContent = 'group ' + c.group + ' · generation ' + c.generation;
  const body = $('members').querySelector('tbody');
  body.replaceChildren();
  const seen = [];
  for (const m of c.members) {
    const tr = el('tr', {
      'data-member': m.member,
      'data-owns': m.owns.join(','),
      'data-standby': m.standby.join(','),
      'data-restoring': m.restoring.map(r => r.partition).join(',')
    });
    if (m.member === self) tr.className = 'self';
    tr.append(
        el('td', {}, m.member || '(this process)'), el('td', {class: 'parts'}, partsText(m.owns)),
        el('td', {class: 'parts'}, partsText(m.standby)));
    const rest = el('td');
    if (!m.restoring.length) rest.textContent = '–';
    for (const r of m.restoring) {
      const pct = r.end_offset > 0 ? Math.min(100, 100 * r.offset / r.end_offset) : 0;
      const p = el('div', {class: 'progress'});
      const bar = el('span', {class: 'bar'});
      bar.append(el('i', {style: 'width:' + pct.toFixed(1) + '%'}));
      p.append(
          el('span', {}, 'p' + r.partition), bar,
          el('span', {}, fmtNum(r.offset) + ' / ' + fmtNum(r.end_offset)));
      rest.append(p);
    }
    tr.append(rest);
    body.append(tr);
    seen.push(m.member);
  }
  document.body.dataset.members = seen.join(' ');
}

function drawHot(h) {
  const body = $('hot').querySelector('tbody');
  body.replaceChildren();
  const top = h.posts.length ? h.posts[0].increments : 1;
  h.posts.forEach((p, i) => {
    const tr = el('tr', {'data-post': String(p.post_id)});
    const bar = el('td', {class: 'bar'});
    bar.append(el('i', {style: 'width:' + (100 * p.increments / top).toFixed(1) + '%'}));
    tr.append(
        el('td', {}, String(i + 1)), el('td', {}, String(p.post_id)),
        el('td', {}, fmtNum(p.increments)), bar);
    body.append(tr);
  });
  if (!h.posts.length) {
    const tr = el('tr');
    tr.append(
        el('td', {colspan: '4', class: 'empty'}, 'no increments applied here in the last minute'));
    body.append(tr);
  }
  document.body.dataset.hotPosts = String(h.posts.length);
}

// --- the loop ---------------------------------------------------------------

let timer = null;
let running = false;
let refreshes = 0;

async function refresh() {
  timer = null;
  running = true;
  try {
    const [s, h, c, hot] = await Promise.all([
      getJson('/v1/status'), getJson('/v1/status/history?since=' + lastT), getJson('/v1/cluster'),
      getJson('/v1/status/hot-posts')
    ]);
    drawStatus(s);
    mergeHistory(h);
    drawNow();
    drawCharts();
    drawSparks();
    drawCluster(c);
    drawHot(hot);
    refreshes++;
    document.body.dataset.refreshes = String(refreshes);
    document.body.dataset.ready = 'true';
    $('updated').textContent = new Date().toLocaleTimeString();
  } catch (e) {
    const banner = $('banner');
    banner.replaceChildren(
        el('div', {'data-code': 'unreachable'}, 'tally does not answer: ' + e.message));
    banner.hidden = false;
  }
  running = false;
  // Nobody looking (a hidden tab): no polling until the page shows again.
  if (!document.hidden) timer = setTimeout(refresh, POLL_MS);
}

document.addEventListener('visibilitychange', () => {
  if (!document.hidden && timer === null && !running) captionCharts();
  refresh();
});

captionCharts();
refresh();
