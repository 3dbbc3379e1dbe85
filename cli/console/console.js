// a2 console: the page's script. Every value from the store or the audit
// trail reaches the page as text (textContent, or an attribute through
// setAttribute): nothing is ever parsed as HTML. Actions are POSTs carrying
// the CSRF token that GET /api/session-info gives.
'use strict';

(() => {
  const TRANSITIONS = ['started', 'claimed', 'renewed', 'taken_over', 'completed',
    'went_idle', 'failed', 'dead_lettered', 'retried', 'skipped', 'cancelled',
    'retyped', 'released', 'retired', 'deleted', 'other', 'gap'];
  const TAIL_ROWS = 500;
  const REFRESH_MS = 5000;

  const state = { info: null, timers: [], tail: null, route: 0 };

  // ── DOM ────────────────────────────────────────────────────────────────

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    append(e, kids);
    return e;
  }

  function append(e, kids) {
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }

  function clear(e) {
    while (e.firstChild) e.removeChild(e.firstChild);
    return e;
  }

  function main() { return document.getElementById('main'); }

  // A link inside the page (the hash route): path and its parameters.
  function href(path, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {}))
      if (v !== null && v !== undefined && v !== '') q.set(k, String(v));
    const s = q.toString();
    return '#' + path + (s ? '?' + s : '');
  }

  function link(path, params, ...kids) {
    return el('a', { href: href(path, params) }, ...kids);
  }

  function sessionLink(id) {
    return link('/session', { id }, el('code', {}, id));
  }

  function eventLink(session, index, label) {
    return link('/event', { session, index }, label || '#' + index);
  }

  // ── values ─────────────────────────────────────────────────────────────

  function fmtTime(ms) {
    if (ms === null || ms === undefined) return '–';
    const d = new Date(ms);
    if (isNaN(d.getTime())) return String(ms);
    return d.toISOString().replace('T', ' ').replace('Z', ' UTC');
  }

  function fmtAge(ms) {
    if (ms === null || ms === undefined) return '–';
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min' + (s % 60 ? ' ' + (s % 60) + ' s' : '');
    const h = Math.floor(m / 60);
    if (h < 48) return h + ' h' + (m % 60 ? ' ' + (m % 60) + ' min' : '');
    return Math.floor(h / 24) + ' d' + (h % 24 ? ' ' + (h % 24) + ' h' : '');
  }

  function fmtBytes(n) {
    if (n === null || n === undefined) return '–';
    const u = ['B', 'kB', 'MB', 'GB', 'TB'];
    let v = n, i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : String(v)) + ' ' + u[i];
  }

  function fmtRate(r) {
    if (r === null || r === undefined) return '–';
    return r >= 10 ? r.toFixed(0) : r.toFixed(1);
  }

  function short(s, n) {
    if (s === null || s === undefined) return '';
    s = String(s);
    return s.length > n ? s.slice(0, n - 1) + '…' : s;
  }

  function pretty(payload) {
    if (payload === null || payload === undefined) return 'null';
    try { return JSON.stringify(JSON.parse(payload), null, 2); } catch (e) { return payload; }
  }

  function causeText(c) {
    if (!c) return '–';
    return c.consumer + (c.lane !== null ? ':' + c.lane : '') + ' #' + c.index + '/' + c.attempt;
  }

  // The state of a cursor's head at time now.
  function headState(c, now) {
    if (c.head === null || c.head === undefined) return { key: 'idle', text: 'idle' };
    if (c.failed_at !== null) return { key: 'dead', text: 'dead letter' };
    if (c.holder !== null && c.expires_at !== null && c.expires_at > now)
      return { key: 'running', text: 'running (' + c.holder + ')' };
    if (c.holder !== null) return { key: 'lapsed', text: 'lapsed claim (' + c.holder + ')' };
    if (c.expires_at !== null && c.expires_at > now)
      return { key: 'held', text: 'held until ' + fmtTime(c.expires_at) };
    return { key: 'pending', text: 'pending' };
  }

  function badge(text, kind) {
    return el('span', { class: 'badge badge-' + String(kind).replace(/[^a-z_]/g, '') }, text);
  }

  // ── the API ────────────────────────────────────────────────────────────

  class ApiError extends Error {
    constructor(message, status, body) { super(message); this.status = status; this.body = body; }
  }

  async function answer(r) {
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) throw new ApiError((body && body.error) || ('HTTP ' + r.status), r.status, body);
    return body;
  }

  async function get(path, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {}))
      if (v !== null && v !== undefined && v !== '') q.set(k, String(v));
    const s = q.toString();
    const r = await fetch(path + (s ? '?' + s : ''), {
      headers: { Accept: 'application/json' }, credentials: 'same-origin', cache: 'no-store',
    });
    return answer(r);
  }

  async function post(path, body) {
    const r = await fetch(path, {
      method: 'POST',
      credentials: 'same-origin',
      headers: {
        'Content-Type': 'application/json',
        Accept: 'application/json',
        [state.info.csrf_header]: state.info.csrf,
      },
      body: JSON.stringify(body),
    });
    return answer(r);
  }

  // ── chrome: toasts, the confirmation, timers ───────────────────────────

  function toast(text, kind) {
    const t = el('div', { class: 'toast ' + (kind || 'ok'), role: kind === 'error' ? 'alert' : 'status' }, text);
    document.getElementById('toasts').append(t);
    setTimeout(() => t.remove(), kind === 'error' ? 12000 : 6000);
  }

  function errorBox(text) {
    return el('div', { class: 'error-box', role: 'alert' }, text);
  }

  // Asks before an action: resolves true on OK. extra: nodes shown in the
  // dialog (an input for a reason).
  function confirmAction(title, body, okText, extra) {
    const modal = document.getElementById('modal');
    document.getElementById('modal-title').textContent = title;
    append(clear(document.getElementById('modal-body')), [el('p', {}, body), extra || null]);
    const ok = document.getElementById('modal-ok');
    const cancel = document.getElementById('modal-cancel');
    ok.textContent = okText;
    modal.hidden = false;
    ok.focus();
    return new Promise((resolve) => {
      const done = (v) => {
        modal.hidden = true;
        ok.removeEventListener('click', yes);
        cancel.removeEventListener('click', no);
        document.removeEventListener('keydown', key);
        resolve(v);
      };
      const yes = () => done(true);
      const no = () => done(false);
      const key = (e) => { if (e.key === 'Escape') done(false); };
      ok.addEventListener('click', yes);
      cancel.addEventListener('click', no);
      document.addEventListener('keydown', key);
    });
  }

  function every(ms, fn) {
    state.timers.push(setInterval(fn, ms));
  }

  function stopPage() {
    for (const t of state.timers) clearInterval(t);
    state.timers = [];
    if (state.tail) { state.tail.close(); state.tail = null; }
  }

  function page(title, ...kids) {
    const m = clear(main());
    m.append(el('h1', {}, title), ...kids.flat());
    return m;
  }

  function table(cls, headers, rows, empty) {
    const t = el('table', { class: 'grid ' + (cls || '') },
      el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))),
      el('tbody', {}, rows));
    if (rows.length === 0 && empty)
      t.tBodies[0].append(el('tr', { class: 'empty' }, el('td', { colspan: headers.length }, empty)));
    return t;
  }

  function actionButton(text, cls, onclick, attrs) {
    if (state.info.read_only) return null;
    return el('button', Object.assign({ type: 'button', class: 'small ' + (cls || ''), onclick }, attrs || {}), text);
  }

  // ── the overview ───────────────────────────────────────────────────────

  function consumerPanel(m) {
    if (!m) return el('p', { class: 'muted' }, 'a2-consumer: no --consumer-metrics URL given.');
    if (m.error) return errorBox('a2-consumer metrics at ' + m.url + ' unavailable: ' + m.error);
    const card = (label, value, cls) => el('div', { class: 'card ' + (cls || '') },
      el('div', { class: 'card-label' }, label), el('div', { class: 'card-value' }, value));
    const samples = Object.entries(m.metrics || {}).sort((a, b) => a[0].localeCompare(b[0]));
    return el('div', {},
      el('div', { class: 'cards', 'data-test': 'consumer-cards' },
        card('Streaming', m.up === null ? '?' : (m.up ? 'yes' : 'no'), m.up ? 'good' : 'bad'),
        card('Connected workers', m.workers === null ? '?' : m.workers),
        card('Lag', fmtBytes(m.lag_bytes)),
        card('Lag (time)', m.lag_seconds === null ? '–' : m.lag_seconds.toFixed(3) + ' s'),
        card('Connections', m.connections === null ? '?' : m.connections)),
      el('details', { class: 'metrics' },
        el('summary', {}, 'All a2_consumer_* metrics from ' + m.url),
        table('compact', ['metric', 'value'], samples.map(([k, v]) =>
          el('tr', {}, el('td', {}, el('code', {}, k)), el('td', { class: 'num' }, String(v)))))));
  }

  async function overview() {
    const body = el('div', {}, el('p', { class: 'muted' }, 'Loading…'));
    page('Overview', body);
    const token = state.route;
    const load = async () => {
      let o;
      try { o = await get('/api/overview'); } catch (e) {
        if (token === state.route) append(clear(body), [errorBox('Could not load the overview: ' + e.message)]);
        return;
      }
      if (token !== state.route) return;
      const audit = o.audit;
      let auditNote;
      if (!audit) auditNote = el('p', { class: 'muted' }, 'Completions per minute need the audit trail (--audit FILE).');
      else if (audit.error) auditNote = errorBox('Audit trail unavailable: ' + audit.error);
      else auditNote = el('p', { class: 'muted' }, 'Completions per minute over the last ' +
        fmtAge(Math.min(audit.window_ms, audit.covered_ms)) + ' of ' + audit.path + '.');
      const rows = o.consumers.map((c) => el('tr', { 'data-consumer': c.consumer },
        el('td', {}, el('code', {}, c.consumer)),
        el('td', { class: 'num' }, c.pending),
        el('td', { class: 'num' }, c.running),
        el('td', { class: 'num' }, c.dead_letters > 0
          ? link('/dead', { consumer: c.consumer }, badge(String(c.dead_letters), 'dead'))
          : '0'),
        el('td', { class: 'num' }, c.oldest_pending_at === null ? '–' : fmtAge(c.oldest_pending_age_ms),
          c.oldest_pending_at === null ? null : el('div', { class: 'sub' }, fmtTime(c.oldest_pending_at))),
        el('td', { class: 'num' }, audit ? fmtRate(c.completions_per_minute) : '–')));
      append(clear(body), [
        el('h2', {}, 'a2-consumer'),
        consumerPanel(o.metrics),
        el('h2', {}, 'Consumers'),
        table('overview', ['Consumer', 'Pending', 'Running', 'Dead letters', 'Oldest pending', 'Completions/min'],
          rows, 'No consumer has pending work, dead letters or recent completions.'),
        auditNote,
        el('p', { class: 'muted small' }, 'Updated ' + fmtTime(o.now) + '; refreshes every ' + REFRESH_MS / 1000 + ' s.'),
      ]);
    };
    await load();
    every(REFRESH_MS, load);
  }

  // ── dead letters ───────────────────────────────────────────────────────

  const FILTER_KEYS = ['consumer', 'type', 'error', 'after', 'before'];

  // datetime-local text (the browser's local time) -> epoch ms.
  function localToMs(s) {
    if (!s) return null;
    const t = new Date(s).getTime();
    return isNaN(t) ? null : t;
  }

  function apiFilter(f) {
    return {
      consumer: f.consumer || null, type: f.type || null, error: f.error || null,
      failed_after: localToMs(f.after), failed_before: localToMs(f.before),
    };
  }

  function describeFilter(f) {
    const parts = [];
    if (f.consumer) parts.push('consumer ' + f.consumer);
    if (f.type) parts.push('type ' + f.type);
    if (f.error) parts.push('error containing “' + f.error + '”');
    if (f.after) parts.push('failed at or after ' + f.after);
    if (f.before) parts.push('failed before ' + f.before);
    return parts.length ? parts.join(', ') : 'every dead letter';
  }

  async function redriveOne(h, action, after) {
    try {
      await post('/api/redrive', { session: h.session, consumer: h.consumer, index: h.index, action });
      toast((action === 'retry' ? 'Retried ' : 'Skipped ') + h.consumer + ' #' + h.index + ' in ' + h.session);
    } catch (e) {
      toast('Could not ' + action + ': ' + e.message, 'error');
    }
    after();
  }

  async function bulk(f, action, after) {
    let n;
    try { n = await get('/api/dead-letters/count', apiFilter(f)); } catch (e) {
      toast('Could not count the dead letters: ' + e.message, 'error');
      return;
    }
    if (n.count === 0) { toast('No dead letter matches ' + describeFilter(f) + '.'); return; }
    const verb = action === 'retry' ? 'Retry' : 'Skip';
    const what = n.count + ' dead letter' + (n.count === 1 ? '' : 's');
    const ok = await confirmAction(verb + ' ' + what + '?',
      verb + ' ' + what + ' matching ' + describeFilter(f) + '. ' +
      (action === 'retry' ? 'They run again with their failure counts reset.'
        : 'Their cursors pass them without running them.'),
      verb + ' ' + n.count);
    if (!ok) return;
    try {
      const r = await post('/api/redrive-matching', { action, filter: apiFilter(f), expected: n.count });
      toast((action === 'retry' ? 'Retried ' : 'Skipped ') + r.count + ' dead letter' + (r.count === 1 ? '' : 's') +
        (r.more ? '; more match the filter now' : '') + '.');
    } catch (e) {
      toast('Bulk ' + action + ' failed: ' + e.message, 'error');
    }
    after();
  }

  function deadRow(h, reload) {
    return el('tr', { 'data-session': h.session, 'data-index': h.index, 'data-consumer': h.consumer },
      el('td', {}, fmtTime(h.failed_at)),
      el('td', {}, sessionLink(h.session)),
      el('td', {}, el('code', {}, h.consumer)),
      el('td', {}, el('code', {}, h.cursor)),
      el('td', {}, eventLink(h.session, h.index), ' ', el('span', { class: 'type' }, h.event.type)),
      el('td', { class: 'num' }, h.attempt),
      el('td', { class: 'num' }, h.failures),
      el('td', { class: 'err', title: h.error || '' }, short(h.error, 160)),
      el('td', { class: 'actions' },
        actionButton('Retry', 'retry', () => redriveOne(h, 'retry', reload)),
        actionButton('Skip', '', () => redriveOne(h, 'skip', reload))));
  }

  async function deadLetters(params) {
    const f = {};
    for (const k of FILTER_KEYS) f[k] = params.get(k) || '';
    const input = (name, label, type, attrs) => el('label', {}, label,
      el('input', Object.assign({ name, type: type || 'text', value: f[name] }, attrs || {})));
    const form = el('form', { class: 'filters', id: 'dead-filter', autocomplete: 'off' },
      input('consumer', 'Consumer'),
      input('type', 'Event type'),
      input('error', 'Error contains', 'text', { maxlength: 1024 }),
      input('after', 'Failed after', 'datetime-local', { step: 1 }),
      input('before', 'Failed before', 'datetime-local', { step: 1 }),
      el('div', { class: 'buttons' },
        el('button', { type: 'submit', class: 'primary' }, 'Filter'),
        el('button', { type: 'button', onclick: () => { location.hash = '#/dead'; } }, 'Clear')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const nf = {};
      for (const k of FILTER_KEYS) nf[k] = form.elements[k].value.trim();
      const h = href('/dead', nf);
      if (location.hash === h) route(); else location.hash = h;
    });
    const summary = el('div', { class: 'summary' });
    const list = el('div', {});
    const more = el('div', {});
    page('Dead letters', form, summary, list, more);
    const token = state.route;
    const reload = () => { if (token === state.route) deadLetters(params); };
    const bulkBar = state.info.read_only ? el('span', { class: 'muted' }, 'read-only: no actions') : el('span', { class: 'bulk' },
      el('button', { type: 'button', class: 'retry', id: 'bulk-retry', onclick: () => bulk(f, 'retry', reload) }, 'Retry all matching…'),
      el('button', { type: 'button', id: 'bulk-skip', onclick: () => bulk(f, 'skip', reload) }, 'Skip all matching…'));
    const tbody = [];
    const t = table('dead', ['Failed at', 'Session', 'Consumer', 'Cursor', 'Event', 'Attempts', 'Failures', 'Last error', ''], []);
    t.id = 'dead-table';
    append(list, [t]);
    let shown = 0;
    const loadPage = async (pageKey) => {
      let r;
      try {
        r = await get('/api/dead-letters', Object.assign(apiFilter(f), { page: pageKey ? JSON.stringify(pageKey) : null }));
      } catch (e) {
        append(clear(list), [errorBox('Could not load the dead letters: ' + e.message)]);
        return;
      }
      if (token !== state.route) return;
      for (const h of r.items) { t.tBodies[0].append(deadRow(h, reload)); tbody.push(h); }
      shown += r.items.length;
      if (shown === 0)
        t.tBodies[0].append(el('tr', { class: 'empty' }, el('td', { colspan: 9 }, 'No dead letter matches ' + describeFilter(f) + '.')));
      append(clear(summary), [el('span', { id: 'dead-count' }, shown + (r.next ? '+' : '') + ' shown'),
        el('span', { class: 'muted' }, ' · ' + describeFilter(f)), ' ', bulkBar]);
      clear(more);
      if (r.next) more.append(el('button', { type: 'button', onclick: () => loadPage(r.next) }, 'Load more'));
    };
    await loadPage(null);
  }

  // ── a session ──────────────────────────────────────────────────────────

  async function cancelHead(session, c, after) {
    const reason = el('input', { type: 'text', id: 'cancel-reason', placeholder: 'reason (optional)', maxlength: 1000 });
    const ok = await confirmAction('Cancel ' + c.consumer + ' #' + c.head + '?',
      'The cursor passes the pending head #' + c.head + ' of ' + c.consumer + ' in ' + session +
      ' without running it. A running head is refused.', 'Cancel the head',
      el('label', { class: 'block' }, 'Reason ', reason));
    if (!ok) return;
    try {
      await post('/api/cancel', { session, consumer: c.consumer, index: c.head, reason: reason.value || null });
      toast('Cancelled ' + c.consumer + ' #' + c.head + ' in ' + session);
    } catch (e) {
      toast('Cancel refused: ' + e.message, 'error');
    }
    after();
  }

  function cursorRow(session, c, now, reload) {
    const st = headState(c, now);
    const h = { session, consumer: c.consumer, index: c.head };
    return el('tr', { 'data-consumer': c.consumer, 'data-cursor': c.cursor, 'data-state': st.key },
      el('td', {}, el('code', {}, c.consumer)),
      el('td', {}, c.kind),
      el('td', {}, el('code', {}, c.cursor)),
      el('td', { class: 'num' }, c.position),
      el('td', { class: 'num' }, c.head === null ? '–' : eventLink(session, c.head)),
      el('td', { class: 'num' }, c.attempt),
      el('td', { class: 'num' }, c.failures),
      el('td', {}, badge(st.text, st.key)),
      el('td', {}, fmtTime(c.expires_at)),
      el('td', { class: 'err', title: c.error || '' }, short(c.error, 120)),
      el('td', { class: 'actions' },
        st.key === 'dead' ? [actionButton('Retry', 'retry', () => redriveOne(h, 'retry', reload)),
          actionButton('Skip', '', () => redriveOne(h, 'skip', reload))] : null,
        c.head !== null && st.key !== 'dead'
          ? actionButton('Cancel', 'danger', () => cancelHead(session, c, reload),
            st.key === 'running' ? { title: 'running: the console will refuse to cancel it' } : null)
          : null));
  }

  function cursorTable(session, cursors, now, reload) {
    return table('cursors', ['Consumer', 'Kind', 'Cursor', 'Position', 'Head', 'Attempt', 'Failures', 'State', 'Expires', 'Last error', ''],
      cursors.map((c) => cursorRow(session, c, now, reload)), 'No cursor.');
  }

  async function session(params) {
    const id = params.get('id');
    if (!id) { page('Session', errorBox('No session id.')); return; }
    const body = el('div', {}, el('p', { class: 'muted' }, 'Loading…'));
    page('Session', el('p', { class: 'subtitle' }, el('code', { id: 'session-id' }, id)), body);
    const token = state.route;
    const reload = () => { if (token === state.route) session(params); };
    let r;
    try { r = await get('/api/session', { id, after: params.get('after') }); } catch (e) {
      append(clear(body), [errorBox('Could not load the session: ' + e.message)]);
      return;
    }
    if (token !== state.route) return;
    const events = r.events.map((e) => el('tr', { 'data-index': e.index },
      el('td', { class: 'num' }, eventLink(id, e.index)),
      el('td', { class: 'type' }, e.type),
      el('td', {}, el('code', {}, short(e.id, 40))),
      el('td', {}, fmtTime(e.created_at)),
      el('td', {}, causeText(e.cause)),
      el('td', {}, el('code', { class: 'payload', title: e.payload_truncated ? 'cut: open the event for more' : null },
        short(e.payload, 160)))));
    append(clear(body), [
      el('h2', {}, 'Cursors'),
      cursorTable(id, r.cursors, r.now, reload),
      r.dead_letters.length ? [el('h2', {}, 'Dead letters'),
        table('dead', ['Failed at', 'Consumer', 'Cursor', 'Event', 'Attempts', 'Failures', 'Last error', ''],
          r.dead_letters.map((h) => el('tr', {},
            el('td', {}, fmtTime(h.failed_at)), el('td', {}, el('code', {}, h.consumer)),
            el('td', {}, el('code', {}, h.cursor)), el('td', {}, eventLink(id, h.index), ' ', el('span', { class: 'type' }, h.event.type)),
            el('td', { class: 'num' }, h.attempt), el('td', { class: 'num' }, h.failures),
            el('td', { class: 'err', title: h.error || '' }, short(h.error, 160)),
            el('td', { class: 'actions' }, actionButton('Retry', 'retry', () => redriveOne(h, 'retry', reload)),
              actionButton('Skip', '', () => redriveOne(h, 'skip', reload))))))] : null,
      el('h2', {}, 'Events'),
      table('events', ['#', 'Type', 'Id', 'Created', 'Cause', 'Payload'], events, 'No event (from the clear marker on).'),
      r.next_after !== null
        ? el('p', {}, link('/session', { id, after: r.next_after }, 'Events after #' + r.next_after + ' →')) : null,
      params.get('after') ? el('p', {}, link('/session', { id }, '← From the first event')) : null,
    ]);
  }

  // ── an event ───────────────────────────────────────────────────────────

  function rowValue(row, key) {
    return row && typeof row === 'object' && row[key] !== undefined ? row[key] : null;
  }

  function change(line, key) {
    const b = rowValue(line.before, key), a = rowValue(line.after, key);
    if (line.before === null || line.before === undefined) return a === null ? '–' : String(a);
    if (line.after === null || line.after === undefined) return (b === null ? '–' : String(b)) + ' →';
    if (a === b) return a === null ? '–' : String(a);
    return (b === null ? '–' : String(b)) + ' → ' + (a === null ? '–' : String(a));
  }

  function historyRow(line) {
    const now = line.after && typeof line.after === 'object' ? line.after : (line.before || {});
    const tr = typeof line.transition === 'string' ? line.transition : 'other';
    return el('tr', { 'data-transition': tr },
      el('td', {}, line.at || '–'),
      el('td', {}, badge(tr, tr), line.role === 'arrived' ? el('div', { class: 'sub' }, 'head arrived here') : null,
        line.role === 'left' ? el('div', { class: 'sub' }, 'head left') : null),
      el('td', {}, el('code', {}, line.consumer === null ? '–' : String(line.consumer))),
      el('td', {}, el('code', {}, line.cursor === null ? '–' : String(line.cursor))),
      el('td', { class: 'num' }, change(line, 'head')),
      el('td', { class: 'num' }, rowValue(now, 'attempt') === null ? '–' : String(now.attempt)),
      el('td', {}, rowValue(now, 'holder') === null ? '–' : String(now.holder)),
      el('td', { class: 'num' }, change(line, 'failures')),
      el('td', { class: 'err' }, rowValue(now, 'error') === null ? '' : String(now.error)),
      el('td', {}, el('code', { class: 'muted' }, line.lsn || '')));
  }

  async function eventPage(params) {
    const session = params.get('session'), index = params.get('index');
    if (!session || !index) { page('Event', errorBox('No session or index.')); return; }
    const body = el('div', {}, el('p', { class: 'muted' }, 'Loading…'));
    page('Event #' + index, el('p', { class: 'subtitle' }, 'in session ', sessionLink(session)), body);
    const token = state.route;
    const reload = () => { if (token === state.route) eventPage(params); };
    let r;
    try { r = await get('/api/event', { session, index }); } catch (e) {
      append(clear(body), [errorBox('Could not load the event: ' + e.message)]);
      return;
    }
    if (token !== state.route) return;
    const e = r.event;
    const dl = (pairs) => el('dl', { class: 'facts' }, pairs.map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
    const h = r.history;
    let history;
    if (!h) history = el('p', { class: 'muted' }, 'The history needs the audit trail (--audit FILE).');
    else if (h.error) history = errorBox('Audit trail unavailable: ' + h.error);
    else history = [
      table('history', ['At', 'Transition', 'Consumer', 'Cursor', 'Head', 'Attempt', 'Holder', 'Failures', 'Error', 'LSN'],
        h.lines.map(historyRow), 'No audited transition of this event in the file.'),
      h.truncated ? el('p', { class: 'muted small' }, 'Only the last ' + fmtBytes(h.scanned_bytes) + ' of the audit file were read.') : null,
    ];
    append(clear(body), [
      e ? dl([
        ['Type', el('span', { class: 'type' }, e.type)],
        ['Id', el('code', {}, e.id)],
        ['Created', fmtTime(e.created_at)],
        ['Cause', e.cause ? eventLink(session, e.cause.index, causeText(e.cause)) : '–'],
        ['Payload', el('pre', { class: 'payload' }, pretty(e.payload),
          e.payload_truncated ? '\n… (' + fmtBytes(e.payload_bytes) + ' in all)' : '')],
      ]) : el('p', { class: 'muted' }, 'The event is not in the store any more (cleared, or never appended); its audited history follows.'),
      el('h2', {}, 'Cursors at this event'),
      cursorTable(session, r.cursors, r.now, reload),
      el('h2', {}, 'History'),
      history,
    ]);
  }

  // ── the live tail ──────────────────────────────────────────────────────

  function tailRow(line) {
    const now = line.after && typeof line.after === 'object' ? line.after : (line.before || {});
    const tr = typeof line.transition === 'string' ? line.transition : 'other';
    const head = rowValue(now, 'head');
    const err = rowValue(now, 'error');
    return el('tr', { 'data-transition': tr },
      el('td', {}, line.at || '–'),
      el('td', {}, badge(tr, tr)),
      el('td', {}, typeof line.session === 'string' ? sessionLink(line.session) : '–'),
      el('td', {}, el('code', {}, line.consumer === null || line.consumer === undefined ? '–' : String(line.consumer))),
      el('td', {}, el('code', {}, line.cursor === null || line.cursor === undefined ? '–' : String(line.cursor))),
      el('td', { class: 'num' }, typeof line.session === 'string' && typeof head === 'number'
        ? eventLink(line.session, head, change(line, 'head')) : change(line, 'head')),
      el('td', { class: 'num' }, rowValue(now, 'attempt') === null ? '–' : String(now.attempt)),
      el('td', { class: err === null ? '' : 'err' }, err !== null ? 'error: ' + err
        : (rowValue(now, 'holder') === null ? '–' : String(now.holder))));
  }

  function tail(params) {
    const f = { consumer: params.get('consumer') || '', session: params.get('session') || '',
      transition: params.get('transition') || '' };
    const form = el('form', { class: 'filters', id: 'tail-filter', autocomplete: 'off' },
      el('label', {}, 'Consumer', el('input', { name: 'consumer', value: f.consumer })),
      el('label', {}, 'Session', el('input', { name: 'session', value: f.session })),
      el('label', {}, 'Transition', el('select', { name: 'transition' },
        el('option', { value: '' }, 'any'),
        TRANSITIONS.map((t) => el('option', { value: t, selected: t === f.transition }, t)))),
      el('div', { class: 'buttons' }, el('button', { type: 'submit', class: 'primary' }, 'Follow')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const h = href('/tail', { consumer: form.elements.consumer.value.trim(),
        session: form.elements.session.value.trim(), transition: form.elements.transition.value });
      if (location.hash === h) route(); else location.hash = h;
    });
    const status = el('span', { id: 'tail-status', class: 'muted' }, 'connecting…');
    let paused = false;
    const pause = el('button', { type: 'button', onclick: () => {
      paused = !paused;
      pause.textContent = paused ? 'Resume' : 'Pause';
    } }, 'Pause');
    const t = table('tail', ['At', 'Transition', 'Session', 'Consumer', 'Cursor', 'Head', 'Attempt', 'Holder / error'], []);
    t.id = 'tail-table';
    const notices = el('div', { class: 'notices' });
    page('Live tail', form,
      el('div', { class: 'summary' }, status, ' ', pause,
        el('button', { type: 'button', onclick: () => clear(t.tBodies[0]) }, 'Clear')),
      notices, t);
    if (!state.info.audit) {
      status.textContent = 'no audit trail: start the console with --audit FILE';
      return;
    }
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
    q.set('last', '50');
    const es = new EventSource('/api/tail?' + q.toString());
    state.tail = es;
    es.onopen = () => { status.textContent = 'following ' + state.info.audit; };
    es.onerror = () => { status.textContent = 'disconnected: reconnecting…'; };
    es.onmessage = (ev) => {
      if (paused) return;
      let line;
      try { line = JSON.parse(ev.data); } catch (e) { return; }
      if (!line || typeof line !== 'object') return;
      t.tBodies[0].prepend(tailRow(line));
      while (t.tBodies[0].rows.length > TAIL_ROWS) t.tBodies[0].lastElementChild.remove();
    };
    es.addEventListener('notice', (ev) => {
      let n;
      try { n = JSON.parse(ev.data); } catch (e) { return; }
      if (n.notice === 'following') { status.textContent = 'following ' + n.message; return; }
      notices.prepend(el('div', { class: 'notice ' + (n.notice === 'missing' || n.notice === 'error' ? 'bad' : '') },
        fmtTime(Date.now()) + ': ' + n.message));
      while (notices.childElementCount > 5) notices.lastElementChild.remove();
    });
  }

  // ── routes ─────────────────────────────────────────────────────────────

  function route() {
    stopPage();
    state.route++;
    const h = location.hash || '#/';
    const at = h.indexOf('?');
    const path = (at < 0 ? h.slice(1) : h.slice(1, at)) || '/';
    const params = new URLSearchParams(at < 0 ? '' : h.slice(at + 1));
    for (const a of document.querySelectorAll('[data-nav]'))
      a.classList.toggle('active', a.getAttribute('data-nav') === path);
    const pages = { '/': overview, '/dead': deadLetters, '/session': session, '/event': eventPage, '/tail': tail };
    const fn = pages[path];
    if (!fn) { page('Not found', errorBox('No page ' + path + '.')); return; }
    Promise.resolve(fn(params)).catch((e) => toast('The page failed: ' + e.message, 'error'));
  }

  async function start() {
    try {
      state.info = await get('/api/session-info');
    } catch (e) {
      append(clear(main()), [errorBox('The console did not answer: ' + e.message)]);
      return;
    }
    const badges = document.getElementById('badges');
    if (state.info.read_only) badges.append(badge('read-only', 'readonly'));
    document.getElementById('footer').textContent = state.info.version;
    document.getElementById('goto-session').addEventListener('submit', (e) => {
      e.preventDefault();
      const v = document.getElementById('goto-session-id').value;
      if (v) location.hash = href('/session', { id: v });
    });
    window.addEventListener('hashchange', route);
    route();
  }

  document.addEventListener('DOMContentLoaded', start);
})();
