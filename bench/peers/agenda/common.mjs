// Shared by worker.mjs and enqueue.mjs: arguments, the monitored MongoDB client, the stats file.
//
// The stats file has the shape bench/stats.py reads from the Python processes
// (RECRUITER_COMMAND_STATS): per command name and per "name:collection", the
// commands started, those whose reply was empty, and the BSON bytes sent and
// received. It is written on SIGUSR2 (bench/procs.py Fleet.flush asks for
// figures that way), every second, and at exit.
import { writeFileSync, renameSync } from 'node:fs';
import { BSON, MongoClient } from 'mongodb';

export function parseArgs(argv, defaults) {
  const out = { ...defaults };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    if (!key.startsWith('--') || i + 1 >= argv.length) {
      throw new Error(`bad argument ${key}: expected --name value pairs`);
    }
    const name = key.slice(2).replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (!(name in defaults)) throw new Error(`unknown option ${key}`);
    out[name] = typeof defaults[name] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
    if (Number.isNaN(out[name])) throw new Error(`${key} wants a number`);
  }
  return out;
}

function isEmptyReply(reply) {
  const cursor = reply && reply.cursor;
  if (cursor) return !((cursor.firstBatch && cursor.firstBatch.length) || (cursor.nextBatch && cursor.nextBatch.length));
  return reply && 'value' in reply && reply.value === null;
}

function size(doc) {
  try { return BSON.calculateObjectSize(doc); } catch { return 0; }
}

export class CommandStats {
  constructor(path) {
    this.path = path;
    this.commands = {};
    this.targets = {};
    this.pending = new Map();
  }

  tally(table, key) {
    table[key] ??= { count: 0, failed: 0, empty: 0, request_bytes: 0, reply_bytes: 0, documents: 0 };
    return table[key];
  }

  attach(client) {
    client.on('commandStarted', (ev) => {
      const coll = typeof ev.command[ev.commandName] === 'string' ? ev.command[ev.commandName] : null;
      const bytes = size(ev.command);
      const a = this.tally(this.commands, ev.commandName);
      a.count += 1; a.request_bytes += bytes;
      const keys = [ev.commandName];
      if (coll) {
        const t = this.tally(this.targets, `${ev.commandName}:${coll}`);
        t.count += 1; t.request_bytes += bytes;
        keys.push(`${ev.commandName}:${coll}`);
      }
      this.pending.set(ev.requestId, keys);
    });
    client.on('commandSucceeded', (ev) => {
      const keys = this.pending.get(ev.requestId);
      this.pending.delete(ev.requestId);
      if (!keys) return;
      const bytes = size(ev.reply);
      const empty = isEmptyReply(ev.reply);
      keys.forEach((k, i) => {
        const t = (i === 0 ? this.commands : this.targets)[k];
        t.reply_bytes += bytes;
        if (empty) t.empty += 1;
      });
    });
    client.on('commandFailed', (ev) => {
      const keys = this.pending.get(ev.requestId);
      this.pending.delete(ev.requestId);
      if (keys) this.commands[keys[0]].failed += 1;
    });
  }

  write(extra = {}) {
    if (!this.path) return;
    const tmp = `${this.path}.tmp`;
    writeFileSync(tmp, JSON.stringify({ written_at: Date.now() / 1000, pid: process.pid, commands: this.commands,
                                        targets: this.targets, ...extra }));
    renameSync(tmp, this.path);
  }
}

export async function monitoredClient(uri, stats, appName, options = {}) {
  const client = new MongoClient(uri, { monitorCommands: true, appName, ...options });
  stats.attach(client);
  await client.connect();
  return client;
}
