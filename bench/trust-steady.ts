import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger } from '../src/db/ledger';
import type { Db } from '../src/db/pool';
import { verificationRate } from '../src/trust/sprt';
import { honestFetch } from '../test/support/cheats';
import { seededRandom } from '../test/support/seeded-random';
import { call, register, request, SimSolver } from './lib/sim';
import { waitUntil } from './lib/stats';

/**
 * The steady-state honest sub-phase (`--only=trust-steady`, docs/trust.md "Detection figures"): with
 * the service's default trust settings, honest fetch solvers (one unless BENCH_STEADY_SOLVERS) and a verifier (the bundled solver's
 * role on `npm start`) serve CLIENT_TASKS client fetches of a local news site whose pages differ
 * between two fetches as real pages do (a "generated at" line, a rotating related-articles block and
 * most-read list, an ad slot, a reader count, and a live ticker on some pages). The honest solvers ask
 * less than the verifier, so client work goes to them and the verifier runs their sampled tasks; each
 * passes the ~3,300 client tasks over which its verification rate falls from 0.5 to the 0.02 floor
 * well before the run ends. Prints the false quarantines, the canaries, the runs' verdicts and similarity, and the
 * verification work (runs and canaries) as a share of all solver work over the whole run and over the
 * last STEADY_TASKS client tasks (solvers at the floor).
 */

const CLIENT_TASKS = Number(process.env.BENCH_STEADY_TASKS ?? 10_000);
// On a machine too busy to send them all, clients stop after this many seconds and the figures cover what was sent.
const MAX_SECONDS = Number(process.env.BENCH_STEADY_MAX_SECONDS ?? Infinity);
// The tail over which the share is taken at steady state: the honest solvers are at the floor by then.
const STEADY_TASKS = Math.min(2_000, Math.floor(CLIENT_TASKS / 5));
const CLIENTS = 16;
// Honest solvers beside the verifier: each reaches the floor after about 3,300 client tasks of its own,
// so fewer solvers reach steady state in fewer client tasks (BENCH_STEADY_SOLVERS, 1 unless set).
const HONEST_SOLVERS = Number(process.env.BENCH_STEADY_SOLVERS ?? 1);
const HONEST_SLOTS = 16;
const VERIFIER_SLOTS = 8;
const ARTICLES = 60;
// One article in LIVE_EVERY is a live page: a ticker of its latest updates, one more every TICK_MS.
const LIVE_EVERY = 10;
const TICK_MS = 3000;

const WORDS = (
  'harbour council budget river station library teacher market festival bridge museum railway school ' +
  'farmers weather storm election mayor hospital nurse project bakery theatre orchestra village coast ' +
  'ferry tunnel airport cyclists parliament minister report survey ' +
  'quietly announced expanded delayed approved rejected opened closed measured reported described ' +
  'northern local annual historic modern rural coastal regional national small large early late'
).split(' ');
const HEADLINES = Array.from({ length: 24 }, (_, i) => phrase(1000 + i, 7));
const ADS = [
  'Save 20 % on winter tyres at Nordwheel this week only.',
  'Learn a language in ten minutes a day: try Lingopath free.',
  'Fresh coffee beans delivered to your door every Friday.',
  'Your next holiday starts here: last-minute ferries to the islands.',
  'Switch your energy plan and pay less from next month.',
  'Hand-made shoes, repaired for life. Visit our workshop.',
  'The new Corvo e-bike: 120 km on one charge.',
  'Home insurance that answers the phone. Get a quote in two minutes.',
];

function phrase(seed: number, words: number) {
  const next = seededRandom(seed);
  const text = Array.from({ length: words }, () => WORDS[Math.floor(next() * WORDS.length)]).join(' ');
  return text[0].toUpperCase() + text.slice(1);
}

const pick = <T>(list: readonly T[], n: number) => [...list].sort(() => Math.random() - 0.5).slice(0, n);

/** One page of the site as it is served now: the article fixed, everything around it drawn per request. */
function newsPage(article: number): string {
  const title = phrase(article, 6);
  const paragraphs = Array.from({ length: 5 }, (_, i) => `<p>${phrase(article * 100 + i, 45)}.</p>`).join('\n');
  const live =
    article % LIVE_EVERY === 0
      ? `<section class="live"><h2>Live updates</h2><ul>${Array.from({ length: 8 }, (_, i) => Math.floor(Date.now() / TICK_MS) - i)
          .map((tick) => `<li>${new Date(tick * TICK_MS).toISOString().slice(11, 19)} ${phrase(article * 100_000 + tick, 12)}.</li>`)
          .join('')}</ul></section>`
      : '';
  return `<!doctype html><html><head><title>${title} | The Harbour Gazette</title><meta name="generated" content="${new Date().toISOString()}"></head>
<body><header><nav><a href="/">Home</a> <a href="/news">News</a> <a href="/sport">Sport</a> <a href="/culture">Culture</a></nav>
<p class="stamp">Updated ${new Date().toISOString()} · edition ${crypto.randomBytes(3).toString('hex')} · ${(1000 + Math.floor(Math.random() * 9000)).toLocaleString('en')} reading now</p></header>
<main><article><h1>${title}</h1><p class="byline">By ${phrase(article + 7, 2)} · ${2 + (article % 9)} min read</p>
${paragraphs}
${live}</article>
<aside class="ad">Advertisement: ${ADS[Math.floor(Math.random() * ADS.length)]}</aside>
<aside class="related"><h2>Related articles</h2><ul>${pick(HEADLINES, 4).map((h) => `<li><a href="/news/${h.length}">${h}</a></li>`).join('')}</ul></aside>
<aside class="most-read"><h2>Most read</h2><ol>${pick(HEADLINES, 5).map((h) => `<li>${h}</li>`).join('')}</ol></aside></main>
<footer>© 2026 The Harbour Gazette · page generated in ${5 + Math.floor(Math.random() * 80)} ms by edge-${Math.floor(Math.random() * 12)}</footer></body></html>`;
}

export interface SteadyFigures {
  client_tasks_sent: number;
  not_answered_200: number;
  seconds: number;
  load_average: { start: number[]; end: number[] };
  solvers: Record<string, unknown>[];
  false_quarantines: number;
  canaries: Record<string, number>;
  runs: Record<string, unknown>;
  verification_share: Record<string, unknown>;
  ledger: { accounts_off: number; open_holds_on_finished_tasks: number; double_movements: number };
}

/** `rates`: the services' VERIFICATION_START_FRACTION and REDUNDANT_RUN_FRACTION, for each solver's rate at the end. */
export async function runTrustSteadyPhase(
  base: string,
  db: Db,
  adminKey: string,
  rates: { start: number; floor: number },
  log: (line: string) => void,
): Promise<SteadyFigures> {
  const loadStart = os.loadavg().map((value) => Math.round(value * 100) / 100);
  const site = http.createServer((req, res) => {
    const article = Number(/^\/news\/(\d+)/.exec(req.url ?? '')?.[1]);
    if (!Number.isInteger(article)) return res.writeHead(404).end('not found');
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(newsPage(article));
  });
  site.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
  const siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
  const admin = { 'X-Admin-API-Key': adminKey };
  const connected: SimSolver[] = [];
  const start = async (price: string, slots: number) => {
    const account = await register(base);
    await call(base, 'POST', '/v1/solver/capabilities', [
      { task_type: 'proxy_fetch', tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'bench', model_name: 'honest', marginal_cost: 0, min_price_points: price, max_concurrent: slots },
    ], account.auth);
    connected.push(await SimSolver.connect(base, account, (frame, self) => void honestFetch(frame, self)));
    return account.account_id;
  };
  try {
    const honestIds: string[] = [];
    for (let i = 0; i < HONEST_SOLVERS; i++) honestIds.push(await start('1', HONEST_SLOTS));
    const verifierId = await start('2', VERIFIER_SLOTS);
    await call(base, 'POST', `/v1/admin/solvers/${verifierId}/verifier`, { verifier: true }, admin);
    const ids = [...honestIds, verifierId];
    const idArray = sql.array(ids, 'text');
    // Client work starts once every solver has passed its probation canary.
    await waitUntil(async () =>
      db.oneFirst(sql.type(z.object({ ready: z.boolean() }))`
        SELECT count(*) = ${ids.length} AS ready FROM solver_reputation WHERE solver_id = ANY(${idArray}) AND task_type = 'proxy_fetch' AND canary_passes >= 1`),
      120_000,
    );
    const client = await register(base);
    await call(base, 'POST', '/v1/admin/deposit', { account_id: client.account_id, amount_points: '1000000' }, admin);

    let sent = 0;
    let failed = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (sent < CLIENT_TASKS && performance.now() - started < MAX_SECONDS * 1000) {
          const i = sent++;
          // A connection reset by a starved API counts as not answered, like any other status.
          const answer = await request(base, 'POST', '/v1/fetch', { url: `${siteUrl}/news/${i % ARTICLES}` }, client.auth).catch(() => ({ status: 0 }));
          if (answer.status !== 200) failed += 1;
          if (i % 1000 === 999) log(`trust steady: ${i + 1} client tasks sent`);
        }
      }),
    );
    const seconds = Math.round((performance.now() - started) / 100) / 10;
    // The last canaries and runs end.
    await waitUntil(async () =>
      db.oneFirst(sql.type(z.object({ settled: z.boolean() }))`
        SELECT NOT EXISTS (SELECT 1 FROM canaries WHERE verdict IS NULL AND solver_id = ANY(${idArray}))
           AND NOT EXISTS (SELECT 1 FROM redundant_runs r JOIN tasks t USING (task_id) WHERE r.concluded_at IS NULL AND t.account_id = ${client.account_id}) AS settled`),
      120_000,
    );

    const solvers = await db.any(sql.type(z.object({ solver_id: z.string(), client_tasks: z.number(), verified_passes: z.number(), verified_failures: z.number(), canary_passes: z.number(), canary_failures: z.number(), disagreements: z.number() }))`
      SELECT r.solver_id,
             (SELECT count(*)::int FROM tasks t WHERE t.account_id = ${client.account_id} AND t.status = 'completed' AND t.solver_id = r.solver_id) AS client_tasks,
             r.verified_passes, r.verified_failures, r.canary_passes, r.canary_failures, r.disagreements
      FROM solver_reputation r WHERE r.solver_id = ANY(${idArray}) AND r.task_type = 'proxy_fetch' ORDER BY r.solver_id`);
    const falseQuarantines = await db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM solver_quarantines WHERE solver_id = ANY(${idArray})`);
    const canaries = await db.any(sql.type(z.object({ verdict: z.string(), n: z.number() }))`
      SELECT COALESCE(verdict, 'open') AS verdict, count(*)::int AS n FROM canaries WHERE solver_id = ANY(${idArray}) GROUP BY 1 ORDER BY 1`);
    const runs = await db.any(sql.type(z.object({ status: z.string(), n: z.number(), min_similarity: z.number().nullable(), p01_similarity: z.number().nullable(), median_similarity: z.number().nullable() }))`
      SELECT r.status, count(*)::int AS n, round(min(r.similarity)::numeric, 3)::float8 AS min_similarity,
             round(percentile_cont(0.01) WITHIN GROUP (ORDER BY r.similarity)::numeric, 3)::float8 AS p01_similarity,
             round(percentile_cont(0.5) WITHIN GROUP (ORDER BY r.similarity)::numeric, 3)::float8 AS median_similarity
      FROM redundant_runs r JOIN tasks t USING (task_id) WHERE t.account_id = ${client.account_id} GROUP BY 1 ORDER BY 1`);
    // Verification work: the attempts of the runs of this client's tasks and of the solvers' canaries, over
    // those and the client's tasks' own attempts; over the whole run and from the first of its last STEADY_TASKS tasks.
    const Work = z.object({ client_attempts: z.number(), run_attempts: z.number(), canary_attempts: z.number(), client_tasks: z.number(), runs: z.number(), canaries: z.number() });
    const workSince = (from: ReturnType<typeof sql.fragment>) =>
      db.one(sql.type(Work)`
        WITH client AS (SELECT task_id FROM tasks WHERE account_id = ${client.account_id} AND created_at >= ${from}),
             runs AS (SELECT r.run_task_id AS task_id FROM redundant_runs r JOIN client USING (task_id) WHERE r.run_task_id IS NOT NULL
                      UNION ALL SELECT r.third_run_task_id FROM redundant_runs r JOIN client USING (task_id) WHERE r.third_run_task_id IS NOT NULL),
             checks AS (SELECT task_id FROM canaries WHERE solver_id = ANY(${idArray}) AND created_at >= ${from})
        SELECT (SELECT count(*)::int FROM task_attempts WHERE task_id IN (SELECT task_id FROM client)) AS client_attempts,
               (SELECT count(*)::int FROM task_attempts WHERE task_id IN (SELECT task_id FROM runs)) AS run_attempts,
               (SELECT count(*)::int FROM task_attempts WHERE task_id IN (SELECT task_id FROM checks)) AS canary_attempts,
               (SELECT count(*)::int FROM client) AS client_tasks, (SELECT count(*)::int FROM runs) AS runs, (SELECT count(*)::int FROM checks) AS canaries`);
    const share = (work: z.infer<typeof Work>) => {
      const verification = work.run_attempts + work.canary_attempts;
      return { ...work, share: Math.round((verification / Math.max(verification + work.client_attempts, 1)) * 10_000) / 10_000 };
    };
    const whole = share(await workSince(sql.fragment`'-infinity'::timestamptz`));
    const steady = share(
      await workSince(sql.fragment`(SELECT created_at FROM tasks WHERE account_id = ${client.account_id} ORDER BY created_at DESC OFFSET ${STEADY_TASKS - 1} LIMIT 1)`),
    );
    const ledger = await auditLedger(db);
    const figures: SteadyFigures = {
      client_tasks_sent: sent,
      not_answered_200: failed,
      seconds,
      load_average: { start: loadStart, end: os.loadavg().map((value) => Math.round(value * 100) / 100) },
      solvers: solvers.map((row) => ({
        role: row.solver_id === verifierId ? 'verifier' : 'honest',
        ...row,
        // The rate its next client task is drawn at (the verifier's own are never drawn).
        rate_now: row.solver_id === verifierId ? 0 : Math.round(verificationRate(row.verified_passes, rates.start, rates.floor) * 10_000) / 10_000,
      })),
      false_quarantines: falseQuarantines,
      canaries: Object.fromEntries(canaries.map((row) => [row.verdict, row.n])),
      runs: Object.fromEntries(runs.map(({ status, ...row }) => [status, row])),
      verification_share: { whole_run: whole, [`last_${STEADY_TASKS}_client_tasks`]: steady },
      ledger: { accounts_off: ledger.accountsOff, open_holds_on_finished_tasks: ledger.openHoldsOnFinishedTasks, double_movements: ledger.doubleMovements },
    };
    log(`trust steady: ${sent} client fetches in ${seconds} s (not answered 200: ${failed}), load average ${figures.load_average.start.join(' ')} → ${figures.load_average.end.join(' ')}`);
    return figures;
  } finally {
    for (const solver of connected) solver.close();
    await new Promise((resolve) => site.close(resolve));
  }
}
