import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'slonik';
import { z } from 'zod';
import type { Db } from '../src/db/pool';
import { DEFAULT_SEARCH_INDEX_DIR } from '../src/solver/config';
import { createLocalSearchBackend } from '../src/solver/search/local-index';
import {
  fabricatedFetch,
  fabricatesOneIn,
  fetchesSuspectedChecks,
  emptyChat,
  fixedSearchList,
  honestChat,
  honestFetch,
  honestSearch,
  staleByOrigin,
  wrongChat,
  wrongOneChatIn,
  type Script,
} from '../test/support/cheats';
import { call, register, request, SimSolver } from './lib/sim';
import { sleep, waitUntil } from './lib/stats';

/**
 * The trust phase (`--only=trust`): with the service's default trust settings (1 probation canary per
 * type, a canary every 1 to 99 attempts of a type, client web tasks verified at 50 % for a newcomer
 * falling to 2 %; canary pages under names of localhost) and search canaries against the bundled
 * index, each scripted cheat of test/support/cheats.ts runs beside honest solvers while clients send
 * fetches, searches and strong-tier chats; one honest fetch solver is a verifier, as the bundled solver
 * is on `npm start`. The cheats ask less than the honest solvers, so they get every client task their
 * slots can take until they are caught: the worst case. Prints per cheat the client tasks it served
 * before its quarantine, the wrong answers among them, and, once an operator confirmed its quarantine
 * (the admin route), what became of each: refunded at once, refunded on the confirmation, or not (its
 * pay vested before the quarantine); all the tasks it was sent until then; the honest solvers' false quarantines (over at least 800 client tasks, MIN_TASKS); and
 * the redundant runs' verdicts and their share of all solver work.
 */

const CHEAT_PRICE = '1';
const HONEST_PRICE = '2';
// Client accounts the requests are spread over, in turn.
const CLIENT_ACCOUNTS = 20;
// A cheat's slots: a share of the clients' requests, the rest going to the honest solvers.
const CHEAT_SLOTS = 2;
const HONEST_SLOTS = 8;
const CLIENTS_PER_TYPE = 4;
// Client tasks of a type sent at most, should a cheat outlast them (its canary count is drawn up to 99).
const MAX_TASKS_PER_TYPE = 1500;
// Client tasks of a type sent at least, cheats caught or not: the honest solvers' share, over which
// their false quarantines are counted, and their canaries (one in 50 attempts on average).
const MIN_TASKS: Record<Kind, number> = { proxy_fetch: 500, web_search: 150, chat_completion: 150 };
// A verdict's timestamp is its transaction's start: attempts begun while it commits were matched before it.
const VERDICT_COMMIT_MARGIN = '2 seconds';

type Kind = 'proxy_fetch' | 'web_search' | 'chat_completion';

const capability = (taskType: Kind, price: string, slots: number) =>
  taskType === 'chat_completion'
    ? { task_type: taskType, tier: 'strong', billing_type: 'per_token', fulfillment_path: 'provider_api', provider_name: 'bench', model_name: 'gpt-4o', marginal_cost: '0', min_price_points: price, max_concurrent: slots }
    : { task_type: taskType, tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'bench', model_name: 'scripted', marginal_cost: 0, min_price_points: price, max_concurrent: slots };

const ARTICLE = `<!doctype html><html><head><title>Harbours</title></head><body><main><h1>Harbours of the North Sea</h1>
<p>Rotterdam handles more cargo than any other port in Europe; its quays run for forty kilometres along the Maas.</p>
<p>Hamburg lies a hundred kilometres up the Elbe, and its warehouse district is built on oak piles.</p></main></body></html>`;
const QUERIES = ['solver points', 'ledger holds', 'screenshot viewport', 'chat completions model', 'domain policy', 'api key rotation'];

export interface TrustFigures {
  cheats: Record<string, unknown>[];
  honest: Record<string, unknown>;
  redundant: Record<string, unknown>;
  seconds: number;
}

export async function runTrustPhase(base: string, db: Db, adminKey: string, log: (line: string) => void): Promise<TrustFigures> {
  const site = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(ARTICLE));
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
  const siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
  const index = createLocalSearchBackend(DEFAULT_SEARCH_INDEX_DIR);
  const search = honestSearch((query, count) => index.search(query, count, new AbortController().signal));
  const connected: SimSolver[] = [];
  const start = async (taskType: Kind, price: string, slots: number, script: Script) => {
    const account = await register(base);
    await call(base, 'POST', '/v1/solver/capabilities', [capability(taskType, price, slots)], account.auth);
    const solver = await SimSolver.connect(base, account, (frame, self) => void script(frame, self));
    connected.push(solver);
    return solver.solverId;
  };
  try {
    const cheats: { name: string; taskType: Kind; solverId: string }[] = [];
    // The chats the chat cheats answered wrongly (what they make up has no fixed text to find in the
    // results: a client's chat keeps none).
    const wrongChats = new Set<string>();
    const recordsWrong =
      (script: Script): Script =>
      (frame, self) => {
        wrongChats.add(frame.task_id);
        return script(frame, self);
      };
    for (const [name, taskType, script] of [
      ['fabricated fetch', 'proxy_fetch', fabricatedFetch],
      ['stale content (cached per origin)', 'proxy_fetch', staleByOrigin()],
      ['fetches what it suspects is a check, makes up the rest', 'proxy_fetch', fetchesSuspectedChecks(base)],
      ['passes what it suspects is a check, makes up one client page in ten', 'proxy_fetch', fabricatesOneIn(10, base)],
      ['fixed search list', 'web_search', fixedSearchList],
      ['wrong chat answers (claims gpt-4o)', 'chat_completion', recordsWrong(wrongChat)],
      ['no model: empty chat answers (claims gpt-4o)', 'chat_completion', recordsWrong(emptyChat)],
      ['a capable model, but wrong on one chat in ten (claims gpt-4o)', 'chat_completion', wrongOneChatIn(10, db, wrongChats)],
    ] as const) {
      cheats.push({ name, taskType, solverId: await start(taskType, CHEAT_PRICE, CHEAT_SLOTS, script) });
    }
    const honestIds: string[] = [];
    for (const [taskType, script] of [
      ['proxy_fetch', honestFetch],
      ['proxy_fetch', honestFetch],
      ['web_search', search],
      ['web_search', search],
      ['chat_completion', honestChat(db)],
      ['chat_completion', honestChat(db)],
    ] as const) {
      honestIds.push(await start(taskType, HONEST_PRICE, HONEST_SLOTS, script));
    }
    // The first honest fetch solver verifies the others' sampled client fetches (the bundled solver's role on
    // npm start), and the first honest chat solver the sampled client chats (a verifier running the model).
    for (const verifier of [honestIds[0], honestIds[4]])
      await call(base, 'POST', `/v1/admin/solvers/${verifier}/verifier`, { verifier: true }, { 'X-Admin-API-Key': adminKey });
    // Clients of several accounts, as a market has: proofs from one account's tasks count once a day per
    // solver (docs/trust.md, "Verified client tasks"), so one account alone would slow every catch.
    const clients: Awaited<ReturnType<typeof register>>[] = [];
    for (let i = 0; i < CLIENT_ACCOUNTS; i++) {
      const client = await register(base);
      await call(base, 'POST', '/v1/admin/deposit', { account_id: client.account_id, amount_points: '1000000' }, { 'X-Admin-API-Key': adminKey });
      clients.push(client);
    }
    const clientIds = sql.array(clients.map((client) => client.account_id), 'text');
    const clientOf = (i: number) => clients[i % clients.length]!;

    // The cheats caught so far (read every half second; the benchmark may look, the service never polls).
    const caught = new Set<string>();
    const readQuarantines = async () => {
      for (const id of await db.anyFirst(sql.type(z.object({ solver_id: z.string() }))`SELECT solver_id FROM solver_quarantines WHERE cleared_at IS NULL`)) caught.add(id);
    };
    let done = false;
    const watcher = (async () => {
      while (!done) {
        await readQuarantines();
        await sleep(500);
      }
    })();
    const send: Record<Kind, (i: number) => Promise<{ status: number; text: string }>> = {
      proxy_fetch: (i) => request(base, 'POST', '/v1/fetch', { url: `${siteUrl}/harbours?i=${i}` }, clientOf(i).auth),
      web_search: (i) => request(base, 'POST', '/v1/search', { query: QUERIES[i % QUERIES.length] }, clientOf(i).auth),
      chat_completion: (i) =>
        request(base, 'POST', '/v1/chat/completions', { model: 'strong', messages: [{ role: 'user', content: `Compute ${1000 + i} * ${17 + (i % 80)}. Reply with the number only.` }] }, clientOf(i).auth),
    };
    const sent: Record<Kind, number> = { proxy_fetch: 0, web_search: 0, chat_completion: 0 };
    const failed: Record<Kind, number> = { proxy_fetch: 0, web_search: 0, chat_completion: 0 };
    const started = performance.now();
    await Promise.all(
      (Object.keys(send) as Kind[]).flatMap((taskType) => {
        const open = () => sent[taskType] < MIN_TASKS[taskType] || cheats.some((cheat) => cheat.taskType === taskType && !caught.has(cheat.solverId));
        return Array.from({ length: CLIENTS_PER_TYPE }, async () => {
          while (open() && sent[taskType] < MAX_TASKS_PER_TYPE) {
            // A connection reset by a starved API counts as not answered, like any other status.
            const answer = await send[taskType](sent[taskType]++).catch(() => ({ status: 0 }));
            if (answer.status !== 200) failed[taskType] += 1;
          }
        });
      }),
    );
    const seconds = Math.round((performance.now() - started) / 100) / 10;
    done = true;
    await watcher;
    // The last canaries, and the redundant runs sampled, end.
    await waitUntil(async () =>
      db.oneFirst(sql.type(z.object({ settled: z.boolean() }))`
        SELECT NOT EXISTS (SELECT 1 FROM canaries WHERE verdict IS NULL AND solver_id = ANY(${sql.array(honestIds, 'text')}))
           AND NOT EXISTS (SELECT 1 FROM redundant_runs r JOIN tasks t USING (task_id) WHERE r.concluded_at IS NULL AND t.account_id = ANY(${clientIds})) AS settled`),
    );

    // An operator confirms each quarantine (the admin route): the cheat's pay not vested is forfeited to
    // refund the clients of the tasks it served in that window.
    const quarantinedCheats = await db.anyFirst(sql.type(z.object({ solver_id: z.string() }))`
      SELECT DISTINCT solver_id FROM solver_quarantines WHERE cleared_at IS NULL AND solver_id = ANY(${sql.array(cheats.map((c) => c.solverId), 'text')})`);
    for (const solverId of quarantinedCheats) {
      await call(base, 'POST', `/v1/admin/solvers/${solverId}/quarantine/confirm`, { note: 'benchmark: confirmed as an operator would' }, { 'X-Admin-API-Key': adminKey });
    }

    const Served = z.object({
      client_tasks: z.number(),
      after_quarantine: z.number(),
      canaries: z.number(),
      canaries_passed: z.number(),
      attempts_until_quarantine: z.number(),
      quarantined: z.boolean(),
    });
    // What becomes of each wrong answer a cheat served: refunded at once (a verification proved it wrong),
    // refunded when the quarantine was confirmed, or not refunded: its pay vested before the quarantine
    // (outside the frozen window), or otherwise (a fault).
    const Refunds = z.object({
      wrong_answers: z.number(),
      wrong_refunded_at_once: z.number(),
      wrong_refunded_on_confirmation: z.number(),
      wrong_vested_before_quarantine: z.number(),
      wrong_not_refunded_otherwise: z.number(),
      refunded_tasks: z.number(),
      refunded_points: z.string(),
    });
    const cheatRows: Record<string, unknown>[] = [];
    for (const cheat of cheats) {
      const figures = await db.one(sql.type(Served)`
        WITH q AS (SELECT min(started_at) AS at FROM solver_quarantines WHERE solver_id = ${cheat.solverId})
        SELECT count(*) FILTER (WHERE t.account_id = ANY(${clientIds}) AND t.status = 'completed')::int AS client_tasks,
               count(*) FILTER (WHERE t.account_id = ANY(${clientIds}) AND a.started_at > (SELECT at FROM q) + ${VERDICT_COMMIT_MARGIN}::interval)::int AS after_quarantine,
               count(*) FILTER (WHERE k.task_id IS NOT NULL)::int AS canaries,
               count(*) FILTER (WHERE k.verdict = 'passed')::int AS canaries_passed,
               count(*) FILTER (WHERE a.started_at <= COALESCE((SELECT at FROM q), 'infinity'))::int AS attempts_until_quarantine,
               (SELECT at FROM q) IS NOT NULL AS quarantined
        FROM task_attempts a JOIN tasks t USING (task_id) LEFT JOIN canaries k USING (task_id)
        WHERE a.solver_id = ${cheat.solverId}`);
      const refunds = await db.one(sql.type(Refunds)`
        WITH q AS (SELECT min(started_at) AS at, min(confirmed_at) AS confirmed FROM solver_quarantines WHERE solver_id = ${cheat.solverId}),
             served AS (
               SELECT t.task_id, t.result FROM tasks t WHERE t.account_id = ANY(${clientIds}) AND t.solver_id = ${cheat.solverId} AND t.status = 'completed'),
             outcome AS (
               -- What the scripted cheats make up: the fetch "# Hello", the fixed search list.
               SELECT (s.result->>'content' = '# Hello' OR s.result->'results'->0->>'url' = 'https://example.com/result/0'
                       OR s.task_id = ANY(${sql.array([...wrongChats], 'text')})) IS TRUE AS wrong,
                      r.amount AS refunded, r.created_at AS refunded_at, h.status AS hold_status, h.closed_at AS hold_closed_at
               FROM served s
               LEFT JOIN ledger_entries r ON r.idempotency_key = 'refund:' || s.task_id
               LEFT JOIN holds h ON h.hold_id = 'held:' || s.task_id)
        SELECT count(*) FILTER (WHERE wrong)::int AS wrong_answers,
               count(*) FILTER (WHERE wrong AND refunded_at < COALESCE((SELECT confirmed FROM q), 'infinity'))::int AS wrong_refunded_at_once,
               count(*) FILTER (WHERE wrong AND refunded_at >= (SELECT confirmed FROM q))::int AS wrong_refunded_on_confirmation,
               count(*) FILTER (WHERE wrong AND refunded IS NULL AND hold_status = 'released' AND hold_closed_at < COALESCE((SELECT at FROM q), 'infinity'))::int AS wrong_vested_before_quarantine,
               count(*) FILTER (WHERE wrong AND refunded IS NULL AND (hold_status IS DISTINCT FROM 'released' OR hold_closed_at >= COALESCE((SELECT at FROM q), 'infinity')))::int AS wrong_not_refunded_otherwise,
               count(refunded)::int AS refunded_tasks,
               trim_scale(COALESCE(sum(refunded), 0))::text AS refunded_points
        FROM outcome`);
      cheatRows.push({ cheat: cheat.name, task_type: cheat.taskType, ...figures, ...refunds });
    }
    const honest = await db.one(sql.type(z.object({ solvers: z.number(), false_quarantines: z.number(), client_tasks: z.number(), canaries_passed: z.number(), canaries_failed: z.number() }))`
      SELECT cardinality(${sql.array(honestIds, 'text')}::text[]) AS solvers,
             (SELECT count(*)::int FROM solver_quarantines WHERE solver_id = ANY(${sql.array(honestIds, 'text')})) AS false_quarantines,
             (SELECT count(*)::int FROM tasks WHERE account_id = ANY(${clientIds}) AND status = 'completed' AND solver_id = ANY(${sql.array(honestIds, 'text')})) AS client_tasks,
             (SELECT count(*)::int FROM canaries WHERE verdict = 'passed' AND solver_id = ANY(${sql.array(honestIds, 'text')})) AS canaries_passed,
             (SELECT count(*)::int FROM canaries WHERE verdict = 'failed' AND solver_id = ANY(${sql.array(honestIds, 'text')})) AS canaries_failed`);
    const cheatIds = sql.array(cheats.map((c) => c.solverId), 'text');
    const runs = await db.any(sql.type(z.object({ status: z.string(), with_cheat: z.boolean(), n: z.number() }))`
      SELECT r.status, COALESCE(r.first_solver_id = ANY(${cheatIds}) OR r.second_solver_id = ANY(${cheatIds}) OR r.third_solver_id = ANY(${cheatIds}), false) AS with_cheat, count(*)::int AS n
      FROM redundant_runs r JOIN tasks t USING (task_id) WHERE t.account_id = ANY(${clientIds}) AND r.task_type <> 'chat_completion' GROUP BY 1, 2 ORDER BY 1, 2`);
    // Verified client chats, by the triad of their three answers (or why there was none).
    const chatRuns = await db.any(sql.type(z.object({ outcome: z.string(), with_cheat: z.boolean(), n: z.number() }))`
      SELECT COALESCE(r.evidence->>'triad', r.status) AS outcome, r.first_solver_id = ANY(${cheatIds}) AS with_cheat, count(*)::int AS n
      FROM redundant_runs r JOIN tasks t USING (task_id) WHERE t.account_id = ANY(${clientIds}) AND r.task_type = 'chat_completion' GROUP BY 1, 2 ORDER BY 1, 2`);
    const clientChats = await db.oneFirst(sql.type(z.object({ n: z.number() }))`
      SELECT count(*)::int AS n FROM tasks WHERE account_id = ANY(${clientIds}) AND status = 'completed' AND task_type = 'chat_completion'`);
    const webTasks = await db.oneFirst(sql.type(z.object({ n: z.number() }))`
      SELECT count(*)::int AS n FROM tasks WHERE account_id = ANY(${clientIds}) AND status = 'completed' AND task_type IN ('proxy_fetch', 'web_search')`);
    const sampled = runs.reduce((sum, row) => sum + row.n, 0);
    // Verification work: the attempts of the runs' tasks, over every attempt solvers made for this client's tasks and those runs.
    const work = await db.one(sql.type(z.object({ client: z.number(), verification: z.number() }))`
      WITH runs AS (
        SELECT r.run_task_id AS task_id FROM redundant_runs r JOIN tasks t USING (task_id) WHERE t.account_id = ANY(${clientIds}) AND r.run_task_id IS NOT NULL
        UNION ALL SELECT r.third_run_task_id FROM redundant_runs r JOIN tasks t USING (task_id) WHERE t.account_id = ANY(${clientIds}) AND r.third_run_task_id IS NOT NULL
      )
      SELECT (SELECT count(*)::int FROM task_attempts a JOIN tasks t USING (task_id) WHERE t.account_id = ANY(${clientIds})) AS client,
             (SELECT count(*)::int FROM task_attempts a WHERE a.task_id IN (SELECT task_id FROM runs)) AS verification`);
    const redundant = {
      client_web_tasks: webTasks,
      sampled,
      sampled_fraction: webTasks ? Math.round((sampled / webTasks) * 10_000) / 10_000 : 0,
      verification_attempts: work.verification,
      verification_share_of_solver_work: Math.round((work.verification / Math.max(work.client + work.verification, 1)) * 10_000) / 10_000,
      ...Object.fromEntries(runs.map((row) => [`${row.status}${row.with_cheat ? '_with_cheat' : '_honest_pair'}`, row.n])),
      client_chats: clientChats,
      chats_verified: chatRuns.reduce((sum, row) => sum + row.n, 0),
      ...Object.fromEntries(chatRuns.map((row) => [`chat_${row.outcome}${row.with_cheat ? '_cheat' : '_honest'}`, row.n])),
    };
    log(`trust phase: ${JSON.stringify(sent)} client tasks sent in ${seconds} s (not answered 200: ${JSON.stringify(failed)})`);
    return { cheats: cheatRows, honest: { ...honest, client_tasks_sent: sent }, redundant, seconds };
  } finally {
    for (const solver of connected) solver.close();
    await new Promise((resolve) => site.close(resolve));
  }
}
