// A user of OpenPAI's official JavaScript SDK (@microsoft/openpai-js-sdk 0.1.5), unchanged,
// against rest-lite: submit a protocol v2 job, list it, read it and its config, find its
// ssh address as the SDK's own `pai ssh` command does, read a task and its log, stop it.
// Each step prints one JSON line `{"step": ..., ...}` that rest-lite/tests/sdk.rs checks;
// any failed expectation ends the script with a non-zero status.
//
// Environment: REST_LITE_URL (http://host:port), REST_LITE_TOKEN, REST_LITE_USER.

'use strict';

const assert = require('assert');
const net = require('net');
const axios = require('axios');
const { PAIV2 } = require('@microsoft/openpai-js-sdk');

const url = new URL(process.env.REST_LITE_URL);
const token = process.env.REST_LITE_TOKEN;
const user = process.env.REST_LITE_USER;
// How long the job may take to start or stop on a slow machine.
const DEADLINE_MS = 120000;

const client = new PAIV2.OpenPAIClient({
  rest_server_uri: url.host,
  https: false,
  token,
  username: user,
});

const job = {
  protocolVersion: 2,
  name: 'sdk_job',
  type: 'job',
  parameters: { word: 'hello' },
  secrets: { password: 'sdk-secret-value' },
  prerequisites: [{ name: 'image', type: 'dockerimage', uri: 'ubuntu:24.04' }],
  taskRoles: {
    worker: {
      instances: 2,
      dockerImage: 'image',
      resourcePerInstance: { cpu: 1, memoryMB: 256, gpu: 1 },
      commands: [
        'echo "ready <% $parameters.word %> $PAI_TASK_INDEX"',
        'exec sleep 600',
      ],
    },
  },
};

function step(name, fields) {
  console.log(JSON.stringify({ step: name, ...fields }));
}

// Reads the job until `done` holds for it (a client polling as the SDK's
// createRunningJob does, with a bound instead of its 5 s sleeps).
async function until(what, done) {
  const started = Date.now();
  for (;;) {
    const detail = await client.job.getJob(user, job.name);
    if (done(detail)) {
      return detail;
    }
    if (Date.now() - started > DEADLINE_MS) {
      throw new Error(`${what}: not within ${DEADLINE_MS} ms: ${JSON.stringify(detail.jobStatus)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// The first line a TCP port says (sshd greets with its version), or null.
function greeting(host, port) {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    let text = '';
    const finish = (value) => {
      socket.destroy();
      resolve(value);
    };
    socket.setTimeout(20000, () => finish(null));
    socket.on('data', (data) => {
      text += data.toString();
      if (text.includes('\n')) finish(text.split('\n')[0].trim());
    });
    socket.on('error', () => finish(null));
    socket.on('end', () => finish(text || null));
  });
}

async function main() {
  const submitted = await client.job.createJob(job);
  step('submit', { message: submitted.message });

  const listed = await client.job.listJobs({ username: user });
  const mine = listed.find((j) => j.name === job.name);
  assert.ok(mine, 'the job is listed');
  step('list', { name: mine.name, protocolVersion: mine.protocolVersion, totalTaskNumber: mine.totalTaskNumber, totalGpuNumber: mine.totalGpuNumber });

  // The storages the user may use, as `pai` lists and reads them.
  const storages = await client.storage.getStorages();
  const defaults = await client.storage.getStorages(true);
  const detail = await client.storage.getStorage('sdk-team');
  step('storages', {
    names: storages.storages.map((s) => s.name),
    defaults: defaults.storages.map((s) => s.name),
    detail: { name: detail.name, share: detail.share, type: detail.type, volumeName: detail.volumeName },
  });

  const running = await until('running', (d) =>
    d.jobStatus.state === 'RUNNING' &&
    d.taskRoles.worker.taskStatuses.every((t) => t.taskState === 'RUNNING'));
  step('get', { state: running.jobStatus.state, username: running.jobStatus.username, tasks: running.taskRoles.worker.taskStatuses.length, containerGpus: running.taskRoles.worker.taskStatuses.map((t) => t.containerGpus) });

  const config = await client.job.getJobConfig(user, job.name);
  assert.strictEqual(config.name, job.name);
  step('config', { secrets: config.secrets, parameters: config.parameters });

  // As the SDK's `pai ssh` command finds a task: its containerIp and containerPorts.ssh.
  const first = running.taskRoles.worker.taskStatuses[0];
  const sshPort = Number(first.containerPorts.ssh);
  assert.ok(sshPort > 0, 'an ssh port');
  const banner = await greeting(first.containerIp, sshPort);
  step('ssh', { ip: first.containerIp, port: sshPort, banner });

  const task = await client.job.getTask(user, job.name, 0, 'worker', 1);
  assert.strictEqual(task.taskIndex, 1);
  step('task', { state: task.taskState, ssh: task.attempts[0].containerPorts.ssh, log: task.attempts[0].containerLog });

  const logs = await client.job.getTaskLogs(user, job.name, 0, 'worker', 1, 0);
  const all = logs.locations.find((l) => l.name === 'all');
  assert.ok(all, 'an "all" log location');
  const started = Date.now();
  let text = '';
  while (!text.includes('ready')) {
    const res = await axios.get(all.uri, { headers: { Authorization: `Bearer ${token}` }, responseType: 'text' });
    text = res.data;
    if (Date.now() - started > DEADLINE_MS) throw new Error(`no log line: ${text}`);
    if (!text.includes('ready')) await new Promise((resolve) => setTimeout(resolve, 100));
  }
  step('logs', { names: logs.locations.map((l) => l.name), text });

  await client.job.addTag(user, job.name, 'sdk-tag');
  const tagged = await client.job.listJobs({ username: user, tagsContain: 'sdk-tag' });
  await client.job.deleteTag(user, job.name, 'sdk-tag');
  const untagged = await client.job.listJobs({ username: user, tagsContain: 'sdk-tag' });
  step('tags', { tagged: tagged.map((j) => [j.name, j.tags]), untagged: untagged.length });

  const stopped = await client.job.updateJobExecutionType(user, job.name, 'STOP');
  step('stop', { message: stopped.message });
  const done = await until('stopped', (d) => d.jobStatus.state === 'STOPPED');
  step('stopped', { state: done.jobStatus.state });

  // A bad job is refused with OpenPAI's error shape, naming the field.
  try {
    await client.job.createJob({ ...job, name: 'bad job' });
    throw new Error('a bad job was accepted');
  } catch (error) {
    step('refused', { status: error.status || (error.response && error.response.status), message: String(error.message) });
  }
}

main().then(
  () => step('done', {}),
  (error) => {
    console.error(error && error.stack ? error.stack : error);
    process.exit(1);
  },
);
