import { sql } from 'slonik';
import { z } from 'zod';
import type { SolverCapabilityInput } from '../schemas/requests';
import {
  eligibleSolvers,
  estimatedPrice,
  figuresOf,
  handOnSlots,
  handOnSlotsIn,
  LIVE_NODE_OF_CONNECTION,
  NODE_LISTED_LIVE,
  recordHandoffsCommitted,
  type Handoff,
  type RequestFigures,
} from './matching';
import type { Db } from './pool';
import { announceCanaryDueIn, isCanaryTaskType, type TrustPolicy } from './reputation';

/** Solver capabilities, the API nodes holding solver sockets, and solver statistics. */

export { eligibleSolvers } from './matching';

const CapabilityRow = z.object({
  task_type: z.string(),
  tier: z.string(),
  billing_type: z.string(),
  fulfillment_path: z.string(),
  provider_name: z.string(),
  model_name: z.string(),
  marginal_cost: z.string(),
  prompt_cost: z.string(),
  completion_cost: z.string(),
  min_price_points: z.string(),
  max_concurrent: z.number(),
  country: z.string().nullable(),
  active_attempts: z.number(),
});
/** A capability as its solver registered it; `country` only when declared. */
export type CapabilityRecord = Omit<z.infer<typeof CapabilityRow>, 'country'> & { country?: string };

const decimal = (value: number | string) => String(value);

/**
 * Replaces a solver's capabilities with `capabilities`. Capabilities that stay keep their running
 * attempts' slots; after a lowered max_concurrent the capability gets no new attempt until the attempts
 * above the new limit have ended. New slots go to waiting tasks they fit, in the same transaction; a
 * capability of a canary task type may make the solver due a canary (probation).
 */
export async function replaceCapabilities(
  db: Db,
  policy: TrustPolicy,
  solverId: string,
  capabilities: SolverCapabilityInput[],
): Promise<{ capabilities: CapabilityRecord[]; handoffs: Handoff[] }> {
  const replaced = await db.transaction(async (tx) => {
    await tx.query(sql.unsafe`
      DELETE FROM solver_capabilities
      WHERE solver_id = ${solverId}
        AND (task_type, model_name) NOT IN (
          SELECT * FROM unnest(${sql.array(
            capabilities.map((c) => c.task_type),
            'text',
          )}::text[], ${sql.array(
            capabilities.map((c) => c.model_name),
            'text',
          )}::text[]))`);
    for (const capability of capabilities) {
      await tx.query(sql.unsafe`
        INSERT INTO solver_capabilities
          (solver_id, task_type, tier, billing_type, fulfillment_path, provider_name, model_name, marginal_cost, prompt_cost,
            completion_cost, min_price_points, max_concurrent, country)
        VALUES (${solverId}, ${capability.task_type}, ${capability.tier}, ${capability.billing_type}, ${capability.fulfillment_path},
                ${capability.provider_name}, ${capability.model_name}, ${decimal(capability.marginal_cost)}::numeric,
                ${decimal(capability.prompt_cost ?? capability.marginal_cost)}::numeric, ${decimal(capability.completion_cost ?? capability.marginal_cost)}::numeric,
                ${decimal(capability.min_price_points)}::numeric, ${capability.max_concurrent}, ${capability.country ?? null}::text)
        ON CONFLICT (solver_id, task_type, model_name) DO UPDATE SET
          tier = EXCLUDED.tier, billing_type = EXCLUDED.billing_type, fulfillment_path = EXCLUDED.fulfillment_path,
          provider_name = EXCLUDED.provider_name, marginal_cost = EXCLUDED.marginal_cost,
          prompt_cost = EXCLUDED.prompt_cost, completion_cost = EXCLUDED.completion_cost,
          min_price_points = EXCLUDED.min_price_points, max_concurrent = EXCLUDED.max_concurrent, country = EXCLUDED.country, updated_at = now()`);
      // Slots 1..max_concurrent exist; free ones above it go (matching offers none of those).
      await tx.query(sql.unsafe`
        WITH added AS (
          INSERT INTO solver_slots (solver_id, task_type, model_name, slot)
          SELECT ${solverId}, ${capability.task_type}, ${capability.model_name}, n FROM generate_series(1, ${capability.max_concurrent}::int) n
          ON CONFLICT DO NOTHING
        )
        DELETE FROM solver_slots
        WHERE solver_id = ${solverId} AND task_type = ${capability.task_type} AND model_name = ${capability.model_name}
          AND slot > ${capability.max_concurrent} AND attempt_id IS NULL`);
    }
    await tx.query(sql.unsafe`INSERT INTO solver_stats (solver_id) VALUES (${solverId}) ON CONFLICT DO NOTHING`);
    if (capabilities.some((c) => isCanaryTaskType(policy, c.task_type)))
      await announceCanaryDueIn(policy, tx, solverId);
    const handed = await handOnSlotsIn(
      tx,
      policy,
      capabilities.map((c) => c.task_type),
    );
    return { capabilities: await listCapabilities(tx as unknown as Db, solverId), ...handed };
  });
  const { deferred, ...rest } = replaced;
  recordHandoffsCommitted(rest.handoffs);
  // A waiting chat whose hold is to be raised for one of the new slots is handed it now (matching.ts, HandedOn).
  if (deferred)
    rest.handoffs = [
      ...rest.handoffs,
      ...(await handOnSlots(
        db,
        policy,
        capabilities.map((c) => c.task_type),
      )),
    ];
  return rest;
}

export async function listCapabilities(db: Db, solverId: string): Promise<CapabilityRecord[]> {
  const rows = await db.any(sql.type(CapabilityRow)`
    SELECT task_type, tier, billing_type, fulfillment_path, provider_name, model_name,
           trim_scale(marginal_cost)::text AS marginal_cost, trim_scale(prompt_cost)::text AS prompt_cost,
           trim_scale(completion_cost)::text AS completion_cost, trim_scale(min_price_points)::text AS min_price_points,
           max_concurrent, country,
           (SELECT count(*)::int FROM solver_slots sl
            WHERE (sl.solver_id, sl.task_type, sl.model_name) = (c.solver_id, c.task_type, c.model_name) AND sl.attempt_id IS NOT NULL) AS active_attempts
    FROM solver_capabilities c WHERE solver_id = ${solverId} ORDER BY task_type, model_name`);
  return rows.map(({ country, ...record }) => (country ? { ...record, country } : record));
}

export async function heartbeatNode(db: Db, nodeId: string): Promise<void> {
  await db.query(sql.unsafe`
    INSERT INTO api_nodes (node_id) VALUES (${nodeId})
    ON CONFLICT (node_id) DO UPDATE SET last_seen_at = now()`);
}

/** The address this node serves HTTP on (canary pages are served to its solvers from there). */
export async function recordNodeUrl(db: Db, nodeId: string, url: string): Promise<void> {
  await db.query(sql.unsafe`UPDATE api_nodes SET base_url = ${url} WHERE node_id = ${nodeId}`);
}

export async function removeNode(db: Db, nodeId: string): Promise<void> {
  await db.query(sql.unsafe`DELETE FROM api_nodes WHERE node_id = ${nodeId}`);
}

/** Drops rows of nodes long dead (their connections cascade), so the tables do not grow forever. */
export async function pruneDeadNodes(db: Db): Promise<void> {
  await db.query(sql.unsafe`DELETE FROM api_nodes WHERE last_seen_at < now() - interval '1 hour'`);
}

/**
 * The newest socket of a solver wins: a reconnect on any node takes over its dispatch. The solver's free
 * slots go to waiting tasks they fit, in the same transaction; a solver online again may be due a canary.
 */
export async function registerConnection(
  db: Db,
  policy: TrustPolicy,
  input: { solverId: string; connectionId: string; nodeId: string },
): Promise<Handoff[]> {
  const handed = await db.transaction(async (tx) => {
    const types = await tx.anyFirst(sql.type(z.object({ task_type: z.string() }))`
      WITH connected AS (
        INSERT INTO solver_connections (solver_id, connection_id, node_id) VALUES (${input.solverId}, ${input.connectionId}, ${input.nodeId})
        ON CONFLICT (solver_id) DO UPDATE SET connection_id = EXCLUDED.connection_id, node_id = EXCLUDED.node_id, connected_at = now(), draining = false
      ), stats AS (
        INSERT INTO solver_stats (solver_id) VALUES (${input.solverId}) ON CONFLICT DO NOTHING
      )
      SELECT DISTINCT task_type FROM solver_capabilities WHERE solver_id = ${input.solverId}`);
    if (types.some((type) => isCanaryTaskType(policy, type))) await announceCanaryDueIn(policy, tx, input.solverId);
    return { types, ...(await handOnSlotsIn(tx, policy, [...types])) };
  });
  recordHandoffsCommitted(handed.handoffs);
  // A waiting chat whose hold is to be raised for one of its slots is handed it now (matching.ts, HandedOn).
  return handed.deferred
    ? [...handed.handoffs, ...(await handOnSlots(db, policy, [...handed.types]))]
    : handed.handoffs;
}

/** The connection takes no new attempt (the solver sent `drain`); a newer connection is left as it is. */
export async function markDraining(db: Db, input: { solverId: string; connectionId: string }): Promise<void> {
  await db.query(
    sql.unsafe`UPDATE solver_connections SET draining = true WHERE solver_id = ${input.solverId} AND connection_id = ${input.connectionId}`,
  );
}

export async function removeConnection(db: Db, input: { solverId: string; connectionId: string }): Promise<void> {
  await db.query(
    sql.unsafe`DELETE FROM solver_connections WHERE solver_id = ${input.solverId} AND connection_id = ${input.connectionId}`,
  );
}

/** Solvers online (connected to a live node) that offer `taskType`, whatever their load or price. */
export async function countOnlineSolvers(
  db: Db,
  policy: TrustPolicy,
  taskType: string,
  options: { strongModels?: string[]; country?: string } = {},
): Promise<number> {
  return db.oneFirst(sql.type(z.object({ count: z.number() }))`
    SELECT count(DISTINCT c.solver_id)::int AS count ${eligibleSolvers(taskType, { ...options, policy })}`);
}

/**
 * Whether the account can hold `fixed.count` tasks of `fixed.points` each plus `count` tasks of the type, each
 * at the lowest estimate
 * an online solver asks for a request of these figures (docs/queue.md, "What a chat pays"): a route that
 * runs several tasks one after another checks, before the first, that it cannot fail for want of points
 * at a later one. `required` is what that takes (null: no solver of the type is online).
 */
export async function canHoldEstimates(
  db: Db,
  policy: TrustPolicy,
  input: {
    accountId: string;
    fixed: { count: number; points: string };
    count: number;
    taskType: string;
    strongModels?: string[];
    figures: RequestFigures;
  },
): Promise<{ required: string | null; enough: boolean }> {
  return db.one(sql.type(z.object({ required: z.string().nullable(), enough: z.boolean() }))`
    WITH cheapest AS (
      SELECT min(${estimatedPrice('c', figuresOf(input.figures))}) AS price ${eligibleSolvers(input.taskType, { strongModels: input.strongModels, policy })}
    ), need AS (SELECT ${input.fixed.count}::int * ${input.fixed.points}::numeric + ${input.count}::int * price AS points FROM cheapest)
    SELECT trim_scale(need.points)::text AS required,
           COALESCE((SELECT available >= need.points FROM balances WHERE account_id = ${input.accountId}), false) AS enough
    FROM need`);
}

const StatsRow = z.object({
  solver_id: z.string(),
  connected: z.boolean(),
  draining: z.boolean(),
  node_id: z.string().nullable(),
  attempts: z.number(),
  completed: z.number(),
  failed: z.number(),
  total_latency_ms: z.number(),
});

export async function solverStats(db: Db, solverId: string) {
  return db.maybeOne(sql.type(StatsRow)`
    SELECT a.account_id AS solver_id,
           (sc.solver_id IS NOT NULL AND ${NODE_LISTED_LIVE}) AS connected,
           COALESCE(sc.draining, false) AS draining, sc.node_id,
           COALESCE(s.attempts, 0) AS attempts, COALESCE(s.completed, 0) AS completed, COALESCE(s.failed, 0) AS failed,
           COALESCE(s.total_latency_ms, 0)::bigint AS total_latency_ms
    FROM accounts a
    LEFT JOIN solver_stats s ON s.solver_id = a.account_id
    LEFT JOIN solver_connections sc ON sc.solver_id = a.account_id
    LEFT JOIN api_nodes n ON n.node_id = sc.node_id
    WHERE a.account_id = ${solverId}`);
}

export async function solverOnlineCounts(db: Db) {
  return db.oneFirst(sql.type(z.object({ count: z.number() }))`
    SELECT count(*)::int AS count FROM solver_connections sc
    ${LIVE_NODE_OF_CONNECTION}`);
}
