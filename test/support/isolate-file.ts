import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import path from 'node:path';

/**
 * Each integration test file runs against a database of its own (a copy of the migrated template) and a
 * Temporal task queue of its own. A file's stacks close when it ends, but its tasks' workflows may still
 * be waiting for their deadlines: with a shared database and queue, the next file's solvers would be
 * handed those tasks.
 */
const base = process.env.TEST_DATABASE_BASE_URL;
if (base) {
  const name = `file_${crypto.randomBytes(5).toString('hex')}`;
  execFileSync(process.execPath, [path.join(__dirname, 'file-database.cjs'), base, name], { stdio: 'inherit', timeout: 60_000 });
  const url = new URL(base);
  url.pathname = `/${name}`;
  process.env.TEST_DATABASE_URL = url.toString();
  process.env.TEMPORAL_TASK_QUEUE = `marketplace-${name}`;
}
