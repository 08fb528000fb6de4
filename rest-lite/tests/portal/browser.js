// What the browser tests share: the system's Chromium ($CHROMIUM) through playwright-core,
// a 1,280 × 900 window (a person's laptop), and one JSON line per step on stdout.

const { chromium } = require('playwright-core');

// Chromium and a page in a fresh context.
async function open() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM,
    args: ['--no-sandbox'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  return { browser, page: await context.newPage() };
}

const step = (name, detail) => console.log(JSON.stringify({ step: name, ...detail }));

module.exports = { open, step };
