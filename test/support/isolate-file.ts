import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import path from 'node:path';

/**
 * Each integration test file runs against a database of its own (a copy of the migrated template) and a
 * Temporal task queue of its own. A file's stacks close when it ends, but its tasks' workflows may still
 * be waiting for their deadlines: with a shared database and queue, the next file's solvers would be
 * handed those tasks. Several jest workers share the servers; each file's database and queue keep them apart.
 */
const base = process.env.TEST_DATABASE_BASE_URL;
if (base) {
  // The worker's number leads the name: a worker drops only its own earlier files' databases, never one a
  // file on another worker is using.
  const name = `file_w${process.env.JEST_WORKER_ID ?? '1'}_${crypto.randomBytes(5).toString('hex')}`;
  execFileSync(process.execPath, [path.join(__dirname, 'file-database.cjs'), base, name], { stdio: 'inherit', timeout: 60_000 });
  const url = new URL(base);
  url.pathname = `/${name}`;
  process.env.TEST_DATABASE_URL = url.toString();
  process.env.TEMPORAL_TASK_QUEUE = `marketplace-${name}`;
}
