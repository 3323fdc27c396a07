// One Agenda worker process for bin/bench (bench/peers/agenda.py starts it).
//
//   node worker.mjs --uri mongodb://host/db --concurrency 1 --process-every 100 --lock-lifetime 5000
//                   --notify changestream|poll --stats FILE --ready FILE --flush-ms 100
//
// It defines three jobs: noop (does nothing), sleep100 (waits 100 ms) and sleep1000
// (waits 1 s, for the SIGKILL test). Every run is recorded in the collection
// bench_runs, on a second, unmonitored client, so the records are not counted as
// Agenda's commands: {job, name, pid, scheduled, started, finished}. With
// --flush-ms 0 a run's record is inserted when it starts and completed when it
// ends (so a run cut short by a SIGKILL still shows); otherwise the finished runs
// are inserted in batches every --flush-ms.
import { writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { MongoClient } from 'mongodb';
import { Agenda } from 'agenda';
import { MongoBackend, MongoChangeStreamNotificationChannel } from '@agendajs/mongo-backend';
import { CommandStats, monitoredClient, parseArgs } from './common.mjs';

const opts = parseArgs(process.argv.slice(2), {
  uri: '', concurrency: 1, processEvery: 100, lockLifetime: 5000, lockLimit: 0, notify: 'changestream',
  stats: '', ready: '', flushMs: 100, collection: 'agendaJobs',
});
if (!opts.uri) throw new Error('--uri is required');

const stats = new CommandStats(opts.stats);
const client = await monitoredClient(opts.uri, stats, 'bench-agenda-worker');
const recorder = new MongoClient(opts.uri, { appName: 'bench-agenda-recorder', maxPoolSize: 2 });
await recorder.connect();
const db = client.db();
const runs = recorder.db().collection('bench_runs');

let finished = 0;
let buffer = [];
const immediate = opts.flushMs <= 0;

async function flushRuns() {
  if (buffer.length === 0) return;
  const batch = buffer;
  buffer = [];
  await runs.insertMany(batch, { ordered: false });
}

function body(waitMs) {
  return async (job) => {
    const record = { job: String(job.attrs._id), name: job.attrs.name, pid: process.pid,
                     scheduled: job.attrs.data && job.attrs.data.at ? new Date(job.attrs.data.at) : null, started: new Date(), finished: null };
    if (immediate) await runs.insertOne(record);
    if (waitMs) await sleep(waitMs);
    record.finished = new Date();
    finished += 1;
    if (immediate) await runs.updateOne({ _id: record._id }, { $set: { finished: record.finished } });
    else buffer.push(record);
  };
}

const lockLimit = opts.lockLimit || 2 * opts.concurrency;
const agenda = new Agenda({
  backend: new MongoBackend({ mongo: db, collection: opts.collection }),
  ...(opts.notify === 'changestream'
    ? { notificationChannel: new MongoChangeStreamNotificationChannel({ db, collection: opts.collection }) } : {}),
  name: `bench-agenda-${process.pid}`,
  processEvery: opts.processEvery,
  maxConcurrency: opts.concurrency,
  defaultConcurrency: opts.concurrency,
  lockLimit,
  defaultLockLimit: lockLimit,
  defaultLockLifetime: opts.lockLifetime,
});
agenda.on('error', (err) => console.error(`agenda error: ${err && err.message}`));
for (const [name, waitMs] of [['noop', 0], ['sleep100', 100], ['sleep1000', 1000]]) {
  agenda.define(name, body(waitMs), { concurrency: opts.concurrency, lockLimit, lockLifetime: opts.lockLifetime });
}

const write = () => stats.write({ finished });
process.on('SIGUSR2', write);
const timer = setInterval(() => {
  flushRuns().catch((err) => console.error(`recording runs failed: ${err.message}`));
  write();
}, Math.max(opts.flushMs, 50));

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  clearInterval(timer);
  try {
    await agenda.stop();
    await flushRuns();
  } finally {
    write();
    await client.close();
    await recorder.close();
    process.exit(0);
  }
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

await agenda.start();
write();
if (opts.ready) writeFileSync(opts.ready, String(process.pid));
