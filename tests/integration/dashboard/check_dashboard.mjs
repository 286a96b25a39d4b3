// Drives Debian's chromium (headless, through playwright-core from web/node_modules) at a running
// daemon's dashboard and writes what it saw as JSON to OUT_JSON, for dashboard_test.cpp to judge:
//   node check_dashboard.mjs GOOD_URL BAD_TOKEN_URL SCREENSHOT USER_DATA_DIR OUT_JSON [EMPTY_JOB]
// EMPTY_JOB: a job with nothing yet (queued: no sample, no loss, no worker), opened on its own.
// BATON_WEB_DIR names web/ (where npm ci put playwright-core). Exits 0 whenever it could look;
// the checks are the C++ test's. No network: chromium's background services are turned off.
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
import path from 'node:path';

const [goodUrl, badUrl, screenshot, userDataDir, outJson, emptyJob] = process.argv.slice(2);
const webDir = process.env.BATON_WEB_DIR;
if (!goodUrl || !badUrl || !screenshot || !userDataDir || !outJson || !webDir) {
  console.error('usage: BATON_WEB_DIR=web node check_dashboard.mjs GOOD_URL BAD_URL PNG PROFILE OUT');
  process.exit(2);
}
const require = createRequire(path.join(webDir, 'package.json'));
const { chromium } = require('playwright-core');

const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: '/usr/bin/chromium', headless: true, args,
  viewport: { width: 1280, height: 1100 },
});
const out = { consoleErrors: [], pageErrors: [] };
try {
  const page = await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') out.consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => out.pageErrors.push(String(e)));
  await page.goto(goodUrl, { waitUntil: 'load' });
  const summary = () => page.evaluate(() => window.batonDashboard.summary());
  // Until two workers have drawn points (the job is recycled by its soft limit), or 25 s.
  try {
    await page.waitForFunction(() => {
      const s = window.batonDashboard && window.batonDashboard.summary();
      return s && s.rssSeries.filter((x) => x.label.startsWith('worker') && x.points > 0).length >= 2
        && s.lossPoints > 0;
    }, null, { timeout: 25000, polling: 250 });
  } catch (e) {
    out.waitError = String(e.message || e).split('\n')[0];
  }
  out.first = await summary();
  await page.waitForTimeout(2500);
  out.second = await summary();
  out.title = await page.title();
  await page.screenshot({ path: screenshot, fullPage: true });

  if (emptyJob) {
    // Null fields never break the page: a job with no sample, no loss and no worker yet.
    const empty = await context.newPage();
    out.emptyConsoleErrors = [];
    empty.on('console', (m) => { if (m.type() === 'error') out.emptyConsoleErrors.push(m.text()); });
    empty.on('pageerror', (e) => out.emptyConsoleErrors.push(String(e)));
    await empty.goto(goodUrl + '#job=' + encodeURIComponent(emptyJob), { waitUntil: 'load' });
    await empty.waitForTimeout(2500);
    out.empty = await empty.evaluate(() => window.batonDashboard.summary());
    out.emptyShown = await empty.evaluate(() => ({
      rssEmpty: !document.getElementById('rss-empty').hidden,
      lossEmpty: !document.getElementById('loss-empty').hidden,
      title: document.getElementById('job-title').textContent,
    }));
    await empty.close();
  }

  const bad = await context.newPage();
  await bad.goto(badUrl, { waitUntil: 'load' });
  await bad.waitForTimeout(1500);
  out.badToken = await bad.evaluate(() => window.batonDashboard.summary());
  out.badTokenText = await bad.textContent('#error');
} finally {
  await context.close();
}
writeFileSync(outJson, JSON.stringify(out, null, 1));
