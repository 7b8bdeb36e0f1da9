import type { ArtifactStore } from '../artifacts/store';
import type { Db } from '../db/pool';
import {
  expireCrawlDocuments,
  expireDeliveryDocuments,
  expireResults,
  releaseIdempotencyKeys,
  resultsPastRetention,
} from '../db/retention';
import { recordRetentionPurge } from '../metrics/metrics';

/**
 * The retention purge, run by every worker on its sweep: results past RESULT_RETENTION_SECONDS lose
 * their artifacts and then their `result` (the task keeps its state, prices and times; the ledger is
 * untouched), crawl and batch-scrape page documents and the webhook bodies carrying them go with the same
 * window, and idempotency keys past their window are released. Small batches, each its own
 * statement, so no lock is held for long and the web path does not wait on it. Workers running it at
 * once may pick the same batch: deletes are idempotent and only the statement that changed a row counts it.
 */

// Rows per statement: a few hundred row locks for a few milliseconds.
export const PURGE_BATCH_ROWS = 200;
// Batches one run takes at most, so a backlog (a first run, a lowered window) is worked off over several sweeps.
const PURGE_MAX_BATCHES = 50;
/** How often a worker runs the purge. */
export const RETENTION_SWEEP_EVERY_MS = 60_000;

export interface PurgeRun {
  results: number;
  artifacts: number;
  /** Crawl page documents and job webhook bodies emptied. */
  documents: number;
  idempotencyKeys: number;
  seconds: number;
}

export async function purgeExpired(
  deps: { db: Db; artifacts: ArtifactStore },
  retentionSeconds: number,
): Promise<PurgeRun> {
  const started = process.hrtime.bigint();
  const run: PurgeRun = { results: 0, artifacts: 0, documents: 0, idempotencyKeys: 0, seconds: 0 };
  try {
    for (let batch = 0; batch < PURGE_MAX_BATCHES; batch++) {
      const expired = await resultsPastRetention(deps.db, retentionSeconds, PURGE_BATCH_ROWS);
      if (expired.length === 0) break;
      // Artifacts first: a run that stops between the two finds the rows again, never an orphaned object.
      await deps.artifacts.delete(expired.flatMap((row) => row.keys));
      const changed = new Set(
        await expireResults(
          deps.db,
          expired.map((row) => row.task_id),
        ),
      );
      run.results += changed.size;
      run.artifacts += expired.filter((row) => changed.has(row.task_id)).reduce((sum, row) => sum + row.keys.length, 0);
      if (expired.length < PURGE_BATCH_ROWS) break;
    }
    for (const expire of [expireCrawlDocuments, expireDeliveryDocuments]) {
      for (let batch = 0; batch < PURGE_MAX_BATCHES; batch++) {
        const expired = await expire(deps.db, retentionSeconds, PURGE_BATCH_ROWS);
        run.documents += expired;
        if (expired < PURGE_BATCH_ROWS) break;
      }
    }
    for (let batch = 0; batch < PURGE_MAX_BATCHES; batch++) {
      const released = await releaseIdempotencyKeys(deps.db, PURGE_BATCH_ROWS);
      run.idempotencyKeys += released;
      if (released < PURGE_BATCH_ROWS) break;
    }
  } finally {
    run.seconds = Number(process.hrtime.bigint() - started) / 1e9;
    recordRetentionPurge(run);
  }
  return run;
}
