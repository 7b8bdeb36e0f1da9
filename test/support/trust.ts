import { sql } from 'slonik';
import { z } from 'zod';
import type { Db } from '../../src/db/pool';
import { waitFor } from './fake-solver';

/** Waits until the solver has no canary open and none due by count (a quarantined solver is sent none). */
export const canariesSettled = (db: Db, solverId: string) =>
  waitFor(async () =>
    db.oneFirst(sql.type(z.object({ settled: z.boolean() }))`
      SELECT NOT EXISTS (SELECT 1 FROM canaries WHERE solver_id = ${solverId} AND verdict IS NULL)
         AND (NOT EXISTS (SELECT 1 FROM solver_reputation WHERE solver_id = ${solverId} AND since_canary >= canary_due_after)
              OR EXISTS (SELECT 1 FROM solver_quarantines WHERE solver_id = ${solverId} AND cleared_at IS NULL)) AS settled`),
    // A due canary starts as the attempt that made it due commits (canary_due), then runs like any task: slow on a busy machine.
    45_000,
  );

/** The solver's count of attempts of a task type since its last canary, and the count at which the next is due. */
export const canaryCounts = (db: Db, solverId: string, taskType: string) =>
  db.maybeOne(sql.type(z.object({ since: z.number(), due: z.number().nullable() }))`
    SELECT since_canary AS since, canary_due_after AS due FROM solver_reputation WHERE solver_id = ${solverId} AND task_type = ${taskType}`);
