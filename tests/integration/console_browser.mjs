// The console in headless Chromium (playwright-core driving Debian's
// chromium), run by test_console_browser.sh against a real console, store,
// a2-consumer and a2-worker. It opens the overview, filters the dead letters
// by error text, retries them in bulk (through the confirmation), sees them
// leave the list and their `retried` lines arrive in the live tail, opens
// one event's audited history, cancels a pending head from its session's
// page, renders hostile values as text, and checks a read-only console
// shows no action. Any dialog (an alert), page error or console error (a
// Content-Security-Policy violation among them) fails it.
//
// Environment: A2_CONSOLE_URL, A2_CONSOLE_RO_URL, A2_CHROMIUM,
// A2_NODE_MODULES, A2_SHOTS (the screenshots' folder), A2_EVIL (the hostile
// session id), A2_EVIL_ERROR (its error text).
import { createRequire } from 'node:module';
import path from 'node:path';

const env = (k) => {
  const v = process.env[k];
  if (v === undefined) { console.error(`console_browser: ${k} is not set`); process.exit(2); }
  return v;
};
const url = env('A2_CONSOLE_URL');
const roUrl = env('A2_CONSOLE_RO_URL');
const shots = env('A2_SHOTS');
const evil = env('A2_EVIL');
const evilError = env('A2_EVIL_ERROR');
const require = createRequire(path.join(env('A2_NODE_MODULES'), '..', 'package.json'));
const { chromium } = require('playwright-core');

let passed = 0;
let failed = 0;
function check(name, ok, detail) {
  if (ok) { passed++; return true; }
  failed++;
  console.error(`FAIL: ${name}${detail === undefined ? '' : ': ' + detail}`);
  return false;
}

const problems = [];
function watch(page, name) {
  page.on('dialog', async (d) => { problems.push(`${name}: a dialog opened: ${d.message()}`); await d.dismiss(); });
  page.on('pageerror', (e) => problems.push(`${name}: page error: ${e.message}`));
  // A refused action (409) is logged by the browser as a failed load: it is
  // expected, and the page shows it; every other console error counts.
  page.on('console', (m) => {
    if (m.type() === 'error' && !/^Failed to load resource: the server responded with a status of 409/.test(m.text()))
      problems.push(`${name}: console error: ${m.text()}`);
  });
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(shots, name) });
}

// Waits until fn() (in the page) is truthy; false after ms.
async function until(page, fn, arg, ms = 20000) {
  try { await page.waitForFunction(fn, arg, { timeout: ms, polling: 100 }); return true; } catch (e) { return false; }
}

async function rowsOf(page, selector) {
  return page.$$eval(selector, (rs) => rs.map((r) => r.textContent));
}

const hash = (route, params) => `${url}/#${route}?${new URLSearchParams(params)}`;

const browser = await chromium.launch({
  executablePath: env('A2_CHROMIUM'),
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const context = await browser.newContext({ viewport: { width: 1360, height: 820 }, deviceScaleFactor: 1 });
  const page = await context.newPage();
  watch(page, 'page');

  // ── the overview ─────────────────────────────────────────────────────
  await page.goto(url + '/');
  check('overview shows the jobs consumer', await until(page, () => document.querySelector('tr[data-consumer="jobs"]')));
  check('overview shows the connected worker', await until(page, () => {
    const c = document.querySelector('[data-test="consumer-cards"]');
    return c && /Connected workers\s*1/.test(c.textContent);
  }), await page.textContent('main'));
  const jobs = await page.$eval('tr[data-consumer="jobs"]', (r) => [...r.cells].map((c) => c.textContent));
  check('jobs has 4 dead letters', jobs[3] === '4', JSON.stringify(jobs));
  check('jobs has completions per minute', Number(jobs[5]) > 0, JSON.stringify(jobs));
  const idle = await page.$eval('tr[data-consumer="idle"]', (r) => [...r.cells].map((c) => c.textContent));
  check('idle has one pending head with an age', idle[1] === '1' && / s/.test(idle[4]), JSON.stringify(idle));
  await shot(page, 'overview.png');

  // ── the live tail, in a second tab, following `retried` ──────────────
  const tail = await context.newPage();
  watch(tail, 'tail');
  await tail.goto(hash('/tail', { transition: 'retried' }));
  check('tail follows the audit trail', await until(tail, () => /^following /.test(document.getElementById('tail-status')?.textContent || '')),
    await tail.textContent('main'));
  check('no retried line yet', (await tail.$$('#tail-table tr[data-transition]')).length === 0);

  // ── dead letters by error text, then a bulk retry ────────────────────
  await page.click('a[data-nav="/dead"]');
  check('dead letters page', await until(page, () => document.querySelectorAll('#dead-table tbody tr[data-session]').length === 4));
  await page.fill('#dead-filter input[name="error"]', 'timeout');
  await page.click('#dead-filter button[type="submit"]');
  check('the filter keeps the two timeouts', await until(page, () => location.hash.includes('error=timeout') &&
    document.querySelectorAll('#dead-table tbody tr[data-session]').length === 2));
  const filtered = await page.$$eval('#dead-table tbody tr[data-session]', (rs) => rs.map((r) => r.getAttribute('data-session')).sort());
  check('the filtered rows', JSON.stringify(filtered) === '["dl-a","dl-b"]', JSON.stringify(filtered));
  const errs = await rowsOf(page, '#dead-table tbody td.err');
  check('each row shows its last error', errs.every((e) => e.includes('upstream timeout')), JSON.stringify(errs));
  const attempts = await page.$$eval('#dead-table tbody tr[data-session]', (rs) => rs.map((r) => r.cells[5].textContent));
  check('each row shows its attempts', attempts.every((a) => a === '2'), JSON.stringify(attempts));
  await shot(page, 'dead-letters.png');
  await page.click('#bulk-retry');
  check('the confirmation says how many', await until(page, () => !document.getElementById('modal').hidden &&
    document.getElementById('modal-title').textContent === 'Retry 2 dead letters?'), await page.textContent('#modal'));
  check('the confirmation names the filter', (await page.textContent('#modal-body')).includes('error containing “timeout”'));
  check('the OK button says how many', (await page.textContent('#modal-ok')) === 'Retry 2');
  await shot(page, 'confirm.png');
  await page.click('#modal-ok');
  check('a toast reports the retry', await until(page, () => [...document.querySelectorAll('.toast')]
    .some((t) => t.textContent.startsWith('Retried 2 dead letters'))), await page.textContent('#toasts'));
  check('the retried ones left the list', await until(page, () =>
    document.querySelectorAll('#dead-table tbody tr[data-session]').length === 0 &&
    /No dead letter matches/.test(document.getElementById('dead-table').textContent)));
  check('the retried lines arrive in the live tail', await until(tail, () =>
    document.querySelectorAll('#tail-table tr[data-transition="retried"]').length === 2));
  const tailRows = await rowsOf(tail, '#tail-table tbody tr');
  check('the tail shows both sessions', tailRows.some((r) => r.includes('dl-a')) && tailRows.some((r) => r.includes('dl-b')),
    JSON.stringify(tailRows));
  check('the tail filter holds', (await tail.$$('#tail-table tbody tr:not([data-transition="retried"])')).length === 0);
  await shot(tail, 'tail.png');

  // ── one event's history ──────────────────────────────────────────────
  const want = 'started claimed failed claimed dead_lettered retried claimed went_idle';
  let seq = '';
  for (let i = 0; i < 40 && seq !== want; i++) {
    await page.goto(hash('/session', { id: 'dl-a' }));
    await until(page, () => document.querySelector('table.events a'));
    await page.click('table.events a[href*="index=1"]');
    await until(page, () => document.querySelector('table.history tbody tr[data-transition]'));
    seq = (await page.$$eval('table.history tbody tr[data-transition]', (rs) => rs.map((r) => r.getAttribute('data-transition')))).join(' ');
    if (seq !== want) await page.waitForTimeout(500);
  }
  check('the event history, whole', seq === want, seq);
  const history = await rowsOf(page, 'table.history tbody tr');
  check('the history shows holders and errors', history.some((r) => r.includes('jobs-1')) &&
    history.some((r) => r.includes('upstream timeout after 30 s')), JSON.stringify(history));
  check('the event page shows the payload', (await page.textContent('pre.payload')).includes('"fail": "upstream timeout after 30 s"'));
  await shot(page, 'event.png');

  // ── cancel a pending head from its session's page ────────────────────
  await page.goto(hash('/session', { id: 'pend-1' }));
  check('a pending head has a Cancel button', await until(page, () =>
    document.querySelector('table.cursors tr[data-state="pending"] button.danger')));
  await page.click('table.cursors tr[data-state="pending"] button.danger');
  check('cancel asks first', await until(page, () => !document.getElementById('modal').hidden));
  await page.fill('#cancel-reason', 'ordered by the browser test');
  await page.click('#modal-ok');
  check('cancelled', await until(page, () => [...document.querySelectorAll('.toast')].some((t) => t.textContent.startsWith('Cancelled idle #1'))),
    await page.textContent('#toasts'));
  check('the head is gone', await until(page, () => document.querySelector('table.cursors tr[data-state="idle"]') ||
    /No cursor/.test(document.querySelector('table.cursors').textContent)));
  // A running head: the console refuses, and says why.
  await page.goto(hash('/session', { id: 'run-1' }));
  check('a running head', await until(page, () => document.querySelector('table.cursors tr[data-state="running"] button.danger')));
  await page.click('table.cursors tr[data-state="running"] button.danger');
  await until(page, () => !document.getElementById('modal').hidden);
  await page.click('#modal-ok');
  check('cancel of a running head refused', await until(page, () => [...document.querySelectorAll('.toast.error')]
    .some((t) => t.textContent.includes('is running (held by busy-1/1'))), await page.textContent('#toasts'));

  // ── hostile values render as text ────────────────────────────────────
  await page.goto(hash('/session', { id: evil }));
  check('the hostile session page', await until(page, () => document.querySelector('table.events tbody tr[data-index]')));
  check('the session id is shown as text', (await page.textContent('#session-id')) === evil,
    JSON.stringify(await page.textContent('#session-id')));
  const payload = await page.textContent('table.events code.payload');
  check('the payload is shown as text', payload.includes('</script><script>alert(2)</script>'), payload);
  const counts = await page.evaluate(() => ({
    img: document.querySelectorAll('img').length,
    script: document.querySelectorAll('script').length,
    b: document.querySelectorAll('main b').length,
  }));
  check('no markup from the data', counts.img === 0 && counts.script === 1 && counts.b === 0, JSON.stringify(counts));
  const err = await page.textContent('table.cursors td.err');
  check('the error text is shown as text', err.startsWith(evilError.slice(0, 40)), err);
  await page.goto(hash('/dead', {}));
  await until(page, () => document.querySelectorAll('#dead-table tbody tr[data-session]').length === 2);
  await shot(page, 'hostile.png');
  await page.goto(hash('/event', { session: evil, index: 1 }));
  check('the hostile event history', await until(page, () =>
    document.querySelectorAll('table.history tbody tr[data-transition]').length >= 5));

  // ── a read-only console: no action anywhere ──────────────────────────
  const ro = await context.newPage();
  watch(ro, 'read-only');
  await ro.goto(roUrl + '/#/dead');
  check('read-only dead letters', await until(ro, () => document.querySelectorAll('#dead-table tbody tr[data-session]').length === 2));
  check('read-only badge', (await ro.textContent('#badges')).includes('read-only'));
  check('read-only: no button in the list', (await ro.$$('#dead-table button, #bulk-retry, #bulk-skip')).length === 0);
  await ro.goto(roUrl + '/#/session?id=dl-c');
  check('read-only session', await until(ro, () => document.querySelector('table.cursors tr[data-state="dead"]')));
  check('read-only: no button on the session page', (await ro.$$('main button')).length === 0);
  await shot(ro, 'read-only.png');

  check('no dialog, page error or console error', problems.length === 0, problems.join('; '));
} finally {
  await browser.close();
}
console.log(`console_browser: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
