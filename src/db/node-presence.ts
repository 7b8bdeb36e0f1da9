import { setTimeout as delay } from 'node:timers/promises';
import pg from 'pg';
import { sql } from 'slonik';
import { z } from 'zod';
import { NODE_LISTED_LIVE } from './matching';
import type { Db } from './pool';

/**
 * An API node's presence: a session-level advisory lock that a connection of the node's own (a NotifyBus
 * that carries nothing else) takes as the node starts, before it lists itself in api_nodes, and holds
 * until that session ends. PostgreSQL ends a session the moment its client's socket closes, so a worker
 * waiting for the lock learns within milliseconds that the node's process is gone (src/tasks/node-watch.ts).
 */
export const PRESENCE_LOCK = 'SELECT pg_advisory_lock(hashtextextended($1, 0))';
const TRY_PRESENCE_LOCK = 'SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS taken';
const PRESENCE_UNLOCK = 'SELECT pg_advisory_unlock(hashtextextended($1, 0))';

export const presenceKey = (nodeId: string) => `node:${nodeId}`;

/** Announced by a node once it is listed: workers begin to watch it. */
export const NODE_STARTED_CHANNEL = 'api_node_started';

/** The name a node's sessions carry (`application_name`, at most 63 bytes), so they can be counted. */
export const nodeSessionName = (nodeId: string) => `marketplace ${nodeId}`.slice(0, 63);

/** `databaseUrl` with the node's session name, for every connection the node opens. */
export function withNodeSessionName(databaseUrl: string, nodeId: string): string {
  const url = new URL(databaseUrl);
  url.searchParams.set('application_name', nodeSessionName(nodeId));
  return url.toString();
}

/**
 * A session of the same node id that has not ended yet (a machine that vanished, whose socket PostgreSQL
 * has not found closed) holds the lock: the node starts without waiting longer than this for its presence,
 * and takes it when that session ends.
 */
export const PRESENCE_START_WAIT_MS = 2000;

// The node's other sessions end as their backends read the closed sockets, within milliseconds of the first.
const OTHER_SESSIONS_CHECKS = 10;
const OTHER_SESSIONS_PAUSE_MS = 100;

/**
 * Waits, on a connection of its own, for the node's presence to end. `gone`: it was held when the wait
 * began, and then it and every other session of the node ended (its process died, or it can no longer
 * reach the database). `absent`: it was not held when asked (the node is reconnecting, or went before
 * anyone looked). `connected`: its presence ended but other sessions of the node live on (that one
 * connection dropped). Rejects when this connection fails or `signal` aborts.
 */
export async function awaitPresenceEnd(
  databaseUrl: string,
  nodeId: string,
  signal: AbortSignal,
): Promise<'gone' | 'absent' | 'connected'> {
  signal.throwIfAborted();
  const client = new pg.Client({ connectionString: databaseUrl });
  client.on('error', () => undefined);
  const stop = () => void client.end().catch(() => undefined);
  signal.addEventListener('abort', stop);
  try {
    await client.connect();
    const key = presenceKey(nodeId);
    const tried = await client.query<{ taken: boolean }>(TRY_PRESENCE_LOCK, [key]);
    if (tried.rows[0].taken) return 'absent';
    await client.query(PRESENCE_LOCK, [key]);
    await client.query(PRESENCE_UNLOCK, [key]);
    for (let check = 1; ; check++) {
      const sessions = await client.query<{ count: number }>(
        'SELECT count(*)::int AS count FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1',
        [nodeSessionName(nodeId)],
      );
      if (sessions.rows[0].count === 0) return 'gone';
      if (check === OTHER_SESSIONS_CHECKS) return 'connected';
      await delay(OTHER_SESSIONS_PAUSE_MS, undefined, { signal });
    }
  } finally {
    signal.removeEventListener('abort', stop);
    stop();
  }
}

/** Nodes that heartbeat within the liveness window: those worth watching. */
export async function liveNodeIds(db: Db): Promise<readonly string[]> {
  return db.anyFirst(sql.type(z.object({ node_id: z.string() }))`
    SELECT n.node_id FROM api_nodes n WHERE ${NODE_LISTED_LIVE}`);
}

export async function isNodeLive(db: Db, nodeId: string): Promise<boolean> {
  return db.exists(sql.unsafe`
    SELECT 1 FROM api_nodes n WHERE n.node_id = ${nodeId} AND ${NODE_LISTED_LIVE}`);
}

/**
 * A node seen gone leaves matching: its liveness lapses at once (a node only cut off from the database
 * lists itself again with its next heartbeat, its solvers' connections kept). Its open attempts are
 * returned with their workflows, to be told. A node that stopped cleanly removed its own row first and
 * ended its attempts itself: `null` then, as when another worker saw it go first.
 */
export async function removeGoneNode(
  db: Db,
  nodeId: string,
): Promise<{ attempts: { attemptId: string; workflowId: string }[] } | null> {
  const rows = await db.any(sql.type(z.object({ attemptId: z.string().nullable(), workflowId: z.string().nullable() }))`
    WITH gone AS (
      UPDATE api_nodes n SET last_seen_at = '-infinity'
      WHERE n.node_id = ${nodeId} AND ${NODE_LISTED_LIVE}
      RETURNING n.node_id
    )
    SELECT a.attempt_id AS "attemptId", t.workflow_id AS "workflowId"
    FROM gone LEFT JOIN task_attempts a ON a.node_id = gone.node_id AND a.ended_at IS NULL
    LEFT JOIN tasks t ON t.task_id = a.task_id`);
  if (rows.length === 0) return null;
  return {
    attempts: rows.flatMap(({ attemptId, workflowId }) => (attemptId && workflowId ? [{ attemptId, workflowId }] : [])),
  };
}
