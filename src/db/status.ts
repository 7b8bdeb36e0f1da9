import { sql } from 'slonik';
import { z } from 'zod';
import type { Db } from './pool';

/** Counts shown by GET /v1/admin/status; each query is cheap (indexed or small tables). */
export async function statusCounts(db: Db): Promise<Record<string, unknown>> {
  const accounts = await db.oneFirst(sql.type(z.object({ count: z.number() }))`
    SELECT count(*)::int AS count FROM accounts WHERE kind = 'user'`);
  const openHolds = await db.oneFirst(sql.type(z.object({ count: z.number() }))`
    SELECT count(*)::int AS count FROM holds WHERE status = 'open'`);
  return { accounts, open_holds: openHolds };
}
