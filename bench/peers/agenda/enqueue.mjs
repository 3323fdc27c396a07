// The Agenda enqueuer for bin/bench: reads "<job name> <count>" lines on stdin, enqueues
// that many jobs with agenda.now() (Agenda has no batch enqueue: one save per job, sent
// concurrently; each job carries its enqueue time in data.at), and answers "ok <count> <ids>" on stdout
// once all are stored. Its commands are counted like the workers' (--stats), written after each batch
// and on the line "stats".
import { createInterface } from 'node:readline';
import { Agenda } from 'agenda';
import { MongoBackend } from '@agendajs/mongo-backend';
import { CommandStats, monitoredClient, parseArgs } from './common.mjs';

const opts = parseArgs(process.argv.slice(2), { uri: '', stats: '', collection: 'agendaJobs' });
if (!opts.uri) throw new Error('--uri is required');
const stats = new CommandStats(opts.stats);
// A small pool: a batch's saves are sent concurrently, and a pool of the driver's default size (100) opened
// that many connections at once, which the embedded server reset under load.
const client = await monitoredClient(opts.uri, stats, 'bench-agenda-enqueuer', { maxPoolSize: 8 });
const agenda = new Agenda({ backend: new MongoBackend({ mongo: client.db(), collection: opts.collection }) });
await agenda.ready;
stats.write();
process.stdout.write('ready\n');

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const [name, countText] = line.trim().split(/\s+/);
  if (!name) continue;
  if (name === 'stats') {
    stats.write();
    process.stdout.write('ok 0 -\n');
    continue;
  }
  const count = Number(countText || 1);
  const jobs = await Promise.all(Array.from({ length: count }, () => agenda.now(name, { at: Date.now() })));
  stats.write();
  process.stdout.write(`ok ${jobs.length} ${jobs.map((j) => String(j.attrs._id)).join(',')}\n`);
}
await client.close();
process.exit(0);
