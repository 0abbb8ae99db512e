// Concord's live dashboard: renders the snapshots of GET /dashboard/events (Server-Sent
// Events, one `snapshot` event per change) into the page. Every text from the cluster is
// set with textContent (never parsed as HTML). window.concordDashboard exposes render() and
// counters for the browser test and the render-time measurement.
'use strict';
(function () {
  const HISTORY = 120; // sparkline points (one per snapshot, about one a second)
  const LIST_LIMIT = 200; // rows shown of a long list (keys, handoffs)
  const history = [];
  let previous = null;

  const $ = (id) => document.getElementById(id);

  function el(tag, props, children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null) continue;
        if (k === 'text') e.textContent = String(v);
        else if (k === 'class') e.className = v;
        else e.setAttribute(k, String(v));
      }
    }
    for (const c of children || []) {
      if (c !== null && c !== undefined) e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    }
    return e;
  }

  function duration(ms) {
    if (ms === null || ms === undefined) return '–';
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + (s % 60) + ' s';
    const h = Math.floor(m / 60);
    if (h < 48) return h + ' h ' + (m % 60) + ' min';
    return Math.floor(h / 24) + ' d ' + (h % 24) + ' h';
  }

  function short(addr) {
    if (!addr) return '–';
    const at = addr.indexOf('@');
    return at >= 0 ? addr.slice(at + 1) : addr;
  }

  function fmt(n) {
    if (n === null || n === undefined || !isFinite(n)) return '–';
    if (n >= 1e6) return (n / 1e6).toFixed(2) + ' M';
    if (n >= 1e4) return (n / 1e3).toFixed(1) + ' k';
    return (Math.round(n * 10) / 10).toString();
  }

  function replace(parent, children) {
    parent.replaceChildren(...children);
  }

  function spark(svg, values) {
    const w = 240, h = 40;
    const max = Math.max(1, ...values);
    const step = values.length > 1 ? w / (HISTORY - 1) : 0;
    const offset = w - step * (values.length - 1);
    const pts = values.map((v, i) => (offset + i * step).toFixed(1) + ',' + (h - 2 - (v / max) * (h - 4)).toFixed(1));
    const line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
    line.setAttribute('points', pts.join(' '));
    svg.replaceChildren(line);
  }

  function renderTraffic(s) {
    const t = s.traffic || {};
    if (previous && previous.traffic && s.generatedAtMs > previous.generatedAtMs) {
      const dt = (s.generatedAtMs - previous.generatedAtMs) / 1000;
      history.push({
        in: Math.max(0, (t.messagesIn - previous.traffic.messagesIn) / dt),
        out: Math.max(0, (t.messagesOut - previous.traffic.messagesOut) / dt),
        rtt: t.heartbeatRttMs || 0,
      });
      while (history.length > HISTORY) history.shift();
    }
    const last = history[history.length - 1];
    $('rate-in').textContent = last ? fmt(last.in) : '–';
    $('rate-out').textContent = last ? fmt(last.out) : '–';
    $('rtt').textContent = t.heartbeatRttMs !== undefined ? String(t.heartbeatRttMs) : '–';
    spark($('spark-in'), history.map((p) => p.in));
    spark($('spark-out'), history.map((p) => p.out));
    spark($('spark-rtt'), history.map((p) => p.rtt));
  }

  function renderMembers(s) {
    const rows = (s.members || []).map((m) => {
      const flags = [];
      if (m.self) flags.push(el('span', { class: 'tag', text: 'self' }));
      if (m.leader) flags.push(el('span', { class: 'tag', text: 'leader' }));
      if (m.oldest) flags.push(el('span', { class: 'tag', text: 'oldest' }));
      const reach = m.reachable ? 'reachable' : 'unreachable (observed by ' + m.observedBy.map(short).join(', ') + ')';
      return el('tr', {
        class: m.reachable ? 'reachable' : 'unreachable',
        'data-node': m.node,
        'data-status': m.status,
        'data-reachable': m.reachable ? 'true' : 'false',
      }, [
        el('td', { text: short(m.node), title: m.node + ' uid ' + m.uid }),
        el('td', { class: 'status-' + m.status, text: m.status }),
        el('td', { class: 'reach', text: reach }),
        el('td', {}, (m.roles || []).map((r) => el('span', { class: 'tag', text: r }))),
        el('td', { text: m.appVersion || '–' }),
        el('td', { text: m.upNumber === null || m.upNumber === undefined ? '–' : m.upNumber }),
        el('td', { text: duration(m.seenForMs) }),
        el('td', {}, flags),
      ]);
    });
    replace($('members').tBodies[0], rows);
    const by = {};
    for (const m of s.members || []) by[m.status] = (by[m.status] || 0) + 1;
    const down = (s.members || []).filter((m) => !m.reachable).length;
    $('member-count').textContent = '(' + rows.length + ': ' +
      Object.keys(by).sort().map((k) => by[k] + ' ' + k).join(', ') + (down ? ', ' + down + ' unreachable' : '') + ')';
  }

  function renderReachability(s) {
    const r = s.reachability || { observers: [], subjects: [], unreachable: [] };
    const box = $('reachability');
    if (!r.unreachable.length) {
      replace(box, [el('p', { class: 'empty', text: 'every member hears every other' })]);
      return;
    }
    const cut = new Set(r.unreachable.map(([o, j]) => o + ':' + j));
    const head = el('tr', {}, [el('th', { text: 'observer \\ subject' })].concat(r.subjects.map((x) => el('th', { text: short(x) }))));
    const body = r.observers.map((o, i) => el('tr', {}, [el('th', { text: short(o) })].concat(
      r.subjects.map((_, j) => cut.has(i + ':' + j) ? el('td', { class: 'x', text: '✗' }) : el('td', { text: '' })))));
    replace(box, [el('table', { class: 'matrix' }, [el('thead', {}, [head]), el('tbody', {}, body)])]);
  }

  function renderSbr(s) {
    const items = (s.sbrDecisions || []).slice().reverse().map((d) => el('li', {}, [
      el('b', { text: new Date(d.atMs).toLocaleTimeString() }), ' ',
      d.decision + ' (' + d.cause + '): downed ' + (d.nodes.length ? d.nodes.map(short).join(', ') : 'none'),
    ]));
    replace($('sbr'), items.length ? items : [el('li', { class: 'empty', text: 'no decision taken on this node' })]);
  }

  function panelSection(name) {
    let sec = $('panel-' + name);
    if (!sec) {
      sec = el('section', { id: 'panel-' + name }, [el('h2', { text: name }), el('div', { class: 'body' })]);
      $('other-panels').appendChild(sec);
    }
    sec.hidden = false;
    return sec.querySelector('.body');
  }

  function renderSharding(p) {
    const out = [];
    if (!(p.types || []).length) out.push(el('p', { class: 'empty', text: 'no entity type runs on this node' }));
    for (const t of p.types || []) {
      out.push(el('h3', { text: 'entity type ' + t.name }));
      if (t.error) { out.push(el('p', { class: 'error', text: t.error })); continue; }
      const regions = (t.regions || []).map((r) => ({
        region: r.region,
        shards: r.shards.length,
        entities: r.shards.reduce((a, x) => a + x[1], 0),
        ids: r.shards.map((x) => x[0]),
      })).sort((a, b) => (a.region < b.region ? -1 : 1));
      const maxShards = Math.max(1, ...regions.map((r) => r.shards));
      const total = regions.reduce((a, r) => a + r.shards, 0);
      const rows = regions.map((r) => {
        const bar = el('div', { class: 'bar' });
        bar.style.width = Math.round((r.shards / maxShards) * 200) + 'px';
        const ids = el('details', {}, [el('summary', { text: 'shard ids' }), el('p', { text: r.ids.join(' ') })]);
        return el('tr', { 'data-region': r.region }, [
          el('td', { text: short(r.region) }), el('td', { text: r.shards }), el('td', { text: r.entities }),
          el('td', {}, [bar]), el('td', {}, [ids]),
        ]);
      });
      out.push(el('table', {}, [
        el('thead', {}, [el('tr', {}, ['region', 'shards', 'entities', '', ''].map((h) => el('th', { text: h })))]),
        el('tbody', {}, rows),
      ]));
      const h = t.handoffs || [];
      out.push(el('p', { class: h.length ? 'handoff' : 'empty', text: total + ' shards in ' + regions.length + ' regions; ' +
        (h.length ? h.length + ' handoffs in flight: ' + h.slice(0, LIST_LIMIT).join(', ') + (h.length > LIST_LIMIT ? ' …' : '') : 'no handoff in flight') }));
    }
    return out;
  }

  function renderSingleton(p) {
    if (!(p.singletons || []).length) return [el('p', { class: 'empty', text: 'no singleton runs on this node' })];
    const rows = (p.singletons || []).map((x) => el('tr', {}, [
      el('td', { text: x.name }), el('td', { text: x.role || 'any' }), el('td', { text: short(x.runsOn) }),
      el('td', { text: x.runningHere ? 'yes' : 'no' }), el('td', { text: x.state }), el('td', { text: x.buffered }),
    ]));
    return [el('table', {}, [
      el('thead', {}, [el('tr', {}, ['name', 'role', 'runs on', 'here', 'manager state here', 'buffered'].map((h) => el('th', { text: h })))]),
      el('tbody', {}, rows),
    ])];
  }

  function renderDdata(p) {
    const keys = p.keys || [];
    const rows = keys.slice(0, LIST_LIMIT).map((k) => el('tr', {}, Object.keys(k).map((f) => el('td', { text: typeof k[f] === 'object' ? JSON.stringify(k[f]) : k[f] }))));
    const head = keys.length ? el('thead', {}, [el('tr', {}, Object.keys(keys[0]).map((h) => el('th', { text: h })))]) : null;
    const out = [el('p', { class: 'count', text: keys.length + ' keys' + (keys.length > LIST_LIMIT ? ' (first ' + LIST_LIMIT + ' shown)' : '') })];
    if (head) out.push(el('table', {}, [head, el('tbody', {}, rows)]));
    return out;
  }

  function renderKv(p) {
    const ring = (p.ring || []).map((r) => el('tr', {}, [el('td', { text: short(r.node) }), el('td', { text: Array.isArray(r.segments) ? r.segments.length : r.segments })]));
    const t = p.transfers || {};
    return [
      el('p', { text: 'N = ' + p.n + ', ' + p.keys + ' keys here, ' + p.handoffsInProgress + ' handoffs and ' + p.exchangesInProgress + ' anti-entropy exchanges in progress, ' + p.pendingSegments + ' segments pending' }),
      el('p', { class: 'count', text: 'transfers: ' + t.handoffKeysSent + ' keys handed off, ' + t.handoffKeysReceived + ' received, ' + t.antiEntropyKeysRepaired + ' repaired' }),
      el('table', {}, [el('thead', {}, [el('tr', {}, [el('th', { text: 'node' }), el('th', { text: 'ring segments' })])]), el('tbody', {}, ring)]),
    ];
  }

  function renderPersistence(p) {
    const out = [el('p', { text: 'store: ' + p.store + (p.ready ? ' (ready)' : ' (not ready)') })];
    if (Array.isArray(p.waits)) {
      out.push(el('p', { class: p.waits.length ? 'handoff' : 'empty', text: p.waits.length
        ? p.waits.length + ' journal segments wait for a handoff: ' + p.waits.slice(0, LIST_LIMIT).map((w) => w.segment + ' (' + w.awaited.map(short).join(', ') + ')').join('; ')
        : 'no journal segment waits for a handoff' }));
    }
    return out;
  }

  function renderClusterMetrics(p) {
    const nodes = p.nodes || [];
    if (!nodes.length) return [el('p', { class: 'empty', text: 'no metrics yet' })];
    const pct = (v) => (typeof v === 'number' ? Math.round(v * 100) + '%' : '–');
    const num = (v) => (typeof v === 'number' ? (Math.round(v * 10) / 10).toString() : '–');
    const mib = (v) => (typeof v === 'number' ? Math.round(v / 1048576) + ' MiB' : '–');
    const m = (n, k) => (n.metrics && n.metrics[k] ? n.metrics[k].smoothed : undefined);
    const head = ['node', 'cpu', 'load', 'rss', 'queued', 'entities', 'capacity'];
    const rows = nodes.slice(0, LIST_LIMIT).map((n) => el('tr', {}, [
      el('td', { text: short(n.node) }), el('td', { text: pct(m(n, 'cpu-combined')) }),
      el('td', { text: num(m(n, 'system-load-average')) }), el('td', { text: mib(m(n, 'memory-rss')) }),
      el('td', { text: num((m(n, 'lane-queue') || 0) + (m(n, 'region-buffered') || 0) + (m(n, 'mailbox-depth') || 0)) }),
      el('td', { text: num(m(n, 'entities')) }), el('td', { text: pct(n.capacity && n.capacity.mix) }),
    ]));
    return [el('table', {}, [el('thead', {}, [el('tr', {}, head.map((h) => el('th', { text: h })))]), el('tbody', {}, rows)])];
  }

  function renderReceptionist(p) {
    const keys = p.keys || [];
    if (!keys.length) return [el('p', { class: 'empty', text: 'no service registered' })];
    const rows = keys.map((k) => el('tr', {}, [
      el('td', { text: k.key }), el('td', { text: String(k.count !== undefined ? k.count : (k.instances || []).length) }), el('td', { text: String(k.unreachable || 0) }),
    ]));
    const out = [el('table', {}, [el('thead', {}, [el('tr', {}, ['service key', 'instances', 'unreachable'].map((h) => el('th', { text: h })))]), el('tbody', {}, rows)])];
    if (p.truncated) out.push(el('p', { class: 'count', text: 'more keys or instances than shown' }));
    return out;
  }

  function renderServices(p) {
    const table = p.table || [];
    const pending = p.pending || [];
    const local = p.local || {};
    if (!table.length && !pending.length) return [el('p', { class: 'empty', text: 'no partitioned service placed' })];
    const out = [el('p', { class: 'count', text: 'partition table version ' + String(p.version || 0) + ' by ' + short(p.writer) })];
    const rows = table.map((t) => el('tr', {}, [
      el('td', { text: t.path }), el('td', { text: String((t.instances || []).length) }),
      el('td', { text: (t.instances || []).map(short).join(', ') }), el('td', { text: local[t.path] || '' }),
    ]));
    out.push(el('table', {}, [el('thead', {}, [el('tr', {}, ['path', 'N', 'instances', 'here'].map((h) => el('th', { text: h })))]), el('tbody', {}, rows)]));
    if (pending.length) {
      const prow = pending.map((c) => el('tr', {}, [el('td', { text: c.path }), el('td', { text: c.from ? short(c.from) : 'new' }), el('td', { text: short(c.to) }), el('td', { text: c.status })]));
      out.push(el('table', {}, [el('thead', {}, [el('tr', {}, ['handoff', 'from', 'to', 'status'].map((h) => el('th', { text: h })))]), el('tbody', {}, prow)]));
    }
    if (p.truncated) out.push(el('p', { class: 'count', text: 'more paths than shown' }));
    return out;
  }

  const RENDERERS = { sharding: renderSharding, singleton: renderSingleton, ddata: renderDdata, kv: renderKv, persistence: renderPersistence, 'cluster-metrics': renderClusterMetrics, receptionist: renderReceptionist, services: renderServices };

  function renderPanels(s) {
    for (const [name, p] of Object.entries(s.panels || {})) {
      const body = panelSection(name);
      let children;
      if (p && p.error) children = [el('p', { class: 'error', text: p.error })];
      else if (p && p.loading) children = [el('p', { class: 'empty', text: 'loading…' })];
      else if (RENDERERS[name]) children = RENDERERS[name](p);
      else children = [el('pre', { text: JSON.stringify(p, null, 2) })];
      replace(body, children);
    }
  }

  function render(s) {
    const t0 = performance.now();
    $('system').textContent = s.system || '';
    $('self').textContent = short(s.self);
    $('leader').textContent = short(s.leader);
    $('oldest').textContent = short(s.oldest);
    $('cluster-id').textContent = s.clusterId || '–';
    $('uptime').textContent = duration(s.uptimeMs);
    renderTraffic(s);
    renderMembers(s);
    renderReachability(s);
    renderSbr(s);
    renderPanels(s);
    previous = s;
    const api = window.concordDashboard;
    api.renders += 1;
    api.lastRenderMs = performance.now() - t0;
    api.state = s;
  }

  function setStream(state) {
    const e = $('stream');
    e.className = 'stream ' + state;
    e.textContent = state;
  }

  function connect() {
    // ?offline: no stream (render() is called by hand, e.g. to measure rendering).
    if (new URLSearchParams(window.location.search).has('offline')) return setStream('offline');
    const es = new EventSource('/dashboard/events');
    es.addEventListener('snapshot', (e) => {
      setStream('live');
      render(JSON.parse(e.data));
    });
    es.onerror = () => setStream('reconnecting'); // EventSource reconnects by itself
  }

  window.concordDashboard = { render, renders: 0, lastRenderMs: 0, state: null, live: true };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', connect);
  else connect();
})();
