// Drives rest-lite's portal as a person does, in headless Chromium (the system's, through
// playwright-core): sign in, submit a spec through the form (first with an error, shown
// next to its line), see the job run, clone and resubmit it, stop it, filter and sort the
// list, delete it; and a page of another origin that tries to submit is refused.
// Screenshots go to $SHOTS. Each step prints one JSON line; rest-lite/tests/portal.rs
// checks them and the server's own state.

const { open, step } = require('./browser');
const http = require('http');
const path = require('path');

const base = process.env.REST_LITE_URL;
const token = process.env.REST_LITE_TOKEN;
const shots = process.env.SHOTS;

const SPEC_WITH_ERROR = `jobName: portal-demo
image: busybox
taskRoles:
  - name: worker
    taskNumber: 0
    cpuNumber: 1
    memoryMB: 256
    portList:
      - label: http
        beginAt: 0
        portNumber: 1
    command: echo serving on $PAI_CONTAINER_HOST_http_PORT_LIST; while :; do sleep 1; done
`;

// Reloads until the job's state is one of `states` and, with `taskStates`, every task's
// is one of those (a job runs as soon as one of its tasks does); at most `ms`.
async function untilState(page, states, taskStates = null, ms = 60000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const state = (await page.textContent('#job-state')).trim();
    const tasks = taskStates === null ? [] : await page.$$eval('tr[id^=task-] span.state',
      (spans) => spans.map((s) => s.textContent.trim()));
    const tasksDone = taskStates === null
      || (tasks.length > 0 && tasks.every((t) => taskStates.includes(t)));
    if (states.includes(state) && tasksDone) return state;
    if (Date.now() > deadline) {
      throw new Error(`job ${state}, tasks ${tasks}: wanted ${states}, tasks ${taskStates}`);
    }
    await page.reload();
  }
}

(async () => {
  const { browser, page } = await open();
  try {
    // Sign in: the jobs page sends us to the form, which comes back to it.
    await page.goto(`${base}/ui/jobs`);
    step('sign-in-form', { url: page.url(), hint: await page.textContent('#token-hint') });
    await page.fill('input[name=token]', token);
    await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
    step('signed-in', { url: page.url() });

    // Submit with an error: the form comes back with it next to the line.
    await Promise.all([page.waitForNavigation(), page.click('#submit-link')]);
    step('fresh-form', {
      text: await page.inputValue('#spec'),
      reference: await page.getAttribute('#spec-reference', 'href'),
    });
    await page.fill('#spec', SPEC_WITH_ERROR);
    await Promise.all([page.waitForNavigation(), page.click('#check')]);
    const bad = await page.$$eval('#spec-errors tr.bad', (rows) =>
      rows.map((r) => ({ id: r.id, text: r.textContent })));
    await page.screenshot({ path: path.join(shots, 'submit-with-an-error.png'), fullPage: true });
    step('error-next-to-its-line', { bad });

    // Fixed, checked, submitted.
    await page.fill('#spec', SPEC_WITH_ERROR.replace('taskNumber: 0', 'taskNumber: 2'));
    await Promise.all([page.waitForNavigation(), page.click('#check')]);
    const warnings = () => page.$$eval('#warnings li', (lis) => lis.map((li) => li.textContent));
    step('checked', { valid: await page.textContent('#valid'), warnings: await warnings() });
    await Promise.all([page.waitForNavigation(), page.click('#submit')]);
    step('submitted', { text: await page.textContent('#submitted'), warnings: await warnings() });
    await Promise.all([page.waitForNavigation(), page.click('#submitted a')]);
    // Every task running: only a running task's ports are links.
    const running = await untilState(page, ['RUNNING'], ['RUNNING']);
    await page.screenshot({ path: path.join(shots, 'job-running.png'), fullPage: true });
    step('running', {
      state: running,
      url: page.url(),
      resources: await page.textContent('#resources'),
      spec: await page.textContent('#spec'),
      links: await page.$$eval('tr[id^=task-] a[target=_blank]', (as) => as.map((a) => [a.textContent, a.href])),
      commands: await page.textContent('#commands'),
      stop: (await page.$('#stop')) !== null,
    });

    // Clone and resubmit: the form holds its spec under a new name.
    await Promise.all([page.waitForNavigation(), page.click('#clone')]);
    const cloned = await page.inputValue('#spec');
    await Promise.all([page.waitForNavigation(), page.click('#submit')]);
    step('cloned', { first_line: cloned.split('\n')[0], text: await page.textContent('#submitted') });

    // A protocol v2 spec uploaded as a file, checked.
    await page.goto(`${base}/ui/submit`);
    await page.setInputFiles('#file', {
      name: 'job.yaml',
      mimeType: 'application/yaml',
      buffer: Buffer.from(`protocolVersion: 2
name: uploaded-v2
type: job
prerequisites:
  - type: dockerimage
    name: image
    uri: busybox
taskRoles:
  train:
    instances: 1
    dockerImage: image
    resourcePerInstance: {cpu: 1, memoryMB: 512, gpu: 0}
    commands:
      - echo trained
`),
    });
    await Promise.all([page.waitForNavigation(), page.click('#check')]);
    step('uploaded', { valid: await page.textContent('#valid') });

    // Stop the first one from its page.
    await page.goto(`${base}/ui/jobs/alice/portal-demo`);
    await Promise.all([page.waitForNavigation(), page.click('#stop')]);
    const stopped = await untilState(page, ['STOPPED']);
    step('stopped', {
      state: stopped,
      links: (await page.$$('tr[id^=task-] a[target=_blank]')).length,
      stop: (await page.$('#stop')) !== null,
      commands: await page.textContent('#commands'),
    });
    await page.screenshot({ path: path.join(shots, 'job-stopped.png'), fullPage: true });

    // The list: filtered by state, searched by name, sorted.
    await page.goto(`${base}/ui/jobs`);
    await page.selectOption('select[name=state]', 'STOPPED');
    await Promise.all([page.waitForNavigation(), page.click('#filters button')]);
    const rows = async () => page.$$eval('#jobs tbody tr', (trs) => trs.map((tr) => tr.dataset.job));
    step('filtered', { url: page.url(), jobs: await rows() });
    await page.goto(`${base}/ui/jobs?q=DEMO-2`);
    step('searched', { jobs: await rows() });
    await page.goto(`${base}/ui/jobs?sort=name`);
    step('sorted', {
      jobs: await rows(),
      durations: await page.$$eval('#jobs tbody tr td:last-child', (tds) => tds.map((td) => td.textContent)),
    });
    await page.screenshot({ path: path.join(shots, 'jobs.png'), fullPage: true });

    // Delete the stopped one.
    await page.goto(`${base}/ui/jobs/alice/portal-demo`);
    // Asked once more: the button is behind "Delete…".
    const hidden = !(await page.isVisible('#delete'));
    await page.click('#delete-open');
    await Promise.all([page.waitForNavigation(), page.click('#delete')]);
    step('deleted', { url: page.url(), asked: hidden });

    // Another origin's page posting to the form: the browser sends it (with the
    // cookie: ports do not make another site), the server refuses it.
    const evil = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<form id=f method=post action="${base}/ui/submit" enctype="multipart/form-data">
        <textarea name=spec>jobName: evil\nimage: x\ntaskRoles:\n  - name: w\n    taskNumber: 1\n    command: id</textarea>
        <input type=hidden name=action value=submit></form>
        <script>document.getElementById('f').submit()</script>`);
    });
    await new Promise((ok) => evil.listen(0, '127.0.0.1', ok));
    const answer = page.waitForResponse((r) => r.url().startsWith(`${base}/ui/submit`));
    await page.goto(`http://127.0.0.1:${evil.address().port}/`);
    const refused = await answer;
    step('other-origin', { status: refused.status(), body: await refused.text() });
    evil.close();
  } catch (e) {
    await page.screenshot({ path: path.join(shots, 'failure.png'), fullPage: true }).catch(() => {});
    step('error', { message: String(e && e.stack || e), url: page.url() });
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
})();
