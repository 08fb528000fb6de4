// Every page at 1,280 px, as a person's browser window: signs in, opens each path of
// $PAGES (JSON), and reports how wide the page is against the window. A page wider than
// its window has a horizontal scroll bar and cut-off text. Screenshots go to $SHOTS.
// rest-lite/tests/portal.rs checks the widths, and on the docs' pages the header and that
// each route's description reads as a sentence.

const { open, step } = require('./browser');
const path = require('path');

const base = process.env.REST_LITE_URL;
const token = process.env.REST_LITE_TOKEN;
const shots = process.env.SHOTS;
const pages = JSON.parse(process.env.PAGES);

(async () => {
  const { browser, page } = await open();
  try {
    await page.goto(`${base}/ui/jobs`);
    await page.fill('input[name=token]', token);
    await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
    for (const [i, where] of pages.entries()) {
      const response = await page.goto(`${base}${where}`);
      const width = await page.evaluate(() => ({
        page: document.documentElement.scrollWidth,
        window: window.innerWidth,
      }));
      await page.screenshot({ path: path.join(shots, `width-${i}.png`) });
      step('width', { path: where, status: response.status(), ...width });
      // What a reader of the docs sees: the header's sign-out, each route's description.
      if (where.startsWith('/docs')) {
        const seen = await page.evaluate(() => ({
          signOut: !!document.querySelector('header form button'),
          user: (document.querySelector('header .who') || {}).textContent || '',
          routes: Array.from(document.querySelectorAll('table.routes td.doc'))
            .map((td) => td.innerText.trim()),
        }));
        step('docs', { path: where, ...seen });
      }
    }
  } catch (e) {
    step('error', { message: String(e && e.stack || e), url: page.url() });
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
})();
