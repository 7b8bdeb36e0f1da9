import { Counter, Gauge } from 'prom-client';
import type { Db } from '../db/pool';
import { checkFunding } from '../db/check-funding';
import { queueFigures, workShareFigures } from '../db/metrics';
import type { TrustPolicy } from '../db/reputation';
import { CAPABILITY_TASK_TYPES } from '../schemas/domain';
import { chatAuditFigures } from '../trust/canaries';
import { recentChatVerifications } from '../db/redundant';
import { PREFIX, registry } from '../metrics/metrics';

/**
 * The figures read when /metrics is scraped, from this process's database and solver sockets: apart
 * from the counters (src/metrics/metrics.ts), which the layers below record into as events commit.
 */

/**
 * What this process can report on: its database (queue figures; with the process's trust policy, the
 * platform account's standing against the checks) and its solver sockets (API nodes).
 */
const sources = { dbs: new Map<Db, TrustPolicy | undefined>(), socketCounts: new Set<() => number>() };

/** Registers a database and/or solver-socket count for the scrape-time gauges; the returned function removes them. */
export function addMetricsSource(source: {
  db?: Db;
  trust?: TrustPolicy;
  connectedSolvers?: () => number;
}): () => void {
  if (source.db) sources.dbs.set(source.db, source.trust);
  if (source.connectedSolvers) sources.socketCounts.add(source.connectedSolvers);
  return () => {
    if (source.db) sources.dbs.delete(source.db);
    if (source.connectedSolvers) sources.socketCounts.delete(source.connectedSolvers);
  };
}

new Gauge({
  name: `${PREFIX}solvers_connected`,
  help: 'Solver WebSockets held by this process (sum over API nodes for the whole service)',
  registers: [registry],
  collect() {
    let total = 0;
    for (const count of sources.socketCounts) total += count();
    this.set(total);
  },
});

const tasksWaiting = new Gauge({
  name: `${PREFIX}tasks_waiting`,
  help:
    "Client tasks waiting for a solver (queued; not the platform's canaries and redundant " +
    'runs), by task type; read from PostgreSQL, the same on every node (use max)',
  labelNames: ['task_type'] as const,
  registers: [registry],
});

const tasksAssigned = new Gauge({
  name: `${PREFIX}tasks_assigned`,
  help:
    'Tasks being worked on by a solver (assigned), by task type; read from PostgreSQL, the same ' +
    'on every node (use max)',
  labelNames: ['task_type'] as const,
  registers: [registry],
});

const freeSlots = new Gauge({
  name: `${PREFIX}solver_free_slots`,
  help:
    'Free concurrency slots of connected solvers, by task type; read from PostgreSQL, the same ' +
    'on every node (use max)',
  labelNames: ['task_type'] as const,
  registers: [registry],
});

const workSolvers = new Gauge({
  name: `${PREFIX}work_solvers`,
  help:
    'Solvers that started attempts of the task type in the last 5 minutes; read from ' +
    'PostgreSQL, the same on every node (use max)',
  labelNames: ['task_type'] as const,
  registers: [registry],
});

const workTopShare = new Gauge({
  name: `${PREFIX}work_top_solver_share_ratio`,
  help:
    "Share of the last 5 minutes' attempts of the task type that the busiest solver took (0 " +
    'when none); read from PostgreSQL, the same on every node (use max)',
  labelNames: ['task_type'] as const,
  registers: [registry],
});

const workFairness = new Gauge({
  name: `${PREFIX}work_fairness_ratio`,
  help:
    "Jain's fairness index of the last 5 minutes' attempts of the task type over the solvers " +
    'online for it or that served it (1: equal; 1/n: one took all; 1 when no work); read from ' +
    'PostgreSQL, the same on every node (use max)',
  labelNames: ['task_type'] as const,
  registers: [registry],
});

const platformAvailable = new Gauge({
  name: `${PREFIX}platform_available_points`,
  help:
    "The platform account's available points, which pay the checks (canaries, chat audits, " +
    'verification runs); read from PostgreSQL, the same on every node (use max)',
  registers: [registry],
});

const checksUnfunded = new Gauge({
  name: `${PREFIX}checks_unfunded`,
  help:
    '1 while checks are sent and the platform account cannot hold one (the check price ' +
    'ceiling): no new solver leaves probation until it is funded; read from PostgreSQL, the ' +
    'same on every node (use max)',
  registers: [registry],
});

const solversAwaitingChecks = new Gauge({
  name: `${PREFIX}solvers_awaiting_checks`,
  help:
    'Solvers online on probation for some task type with no check open: waiting for one (for ' +
    'ever, while checks are unfunded); read from PostgreSQL, the same on every node (use max)',
  registers: [registry],
});

/**
 * The chat audit gauges look at the last day: enough audits per model for a pass rate to say
 * something, and one index range read per scrape (canaries_chat_judged_idx).
 */
export const CHAT_AUDIT_WINDOW_SECONDS = 24 * 3600;

const chatAuditsJudged = new Gauge({
  name: `${PREFIX}chat_audits_judged`,
  help:
    'Chat audits judged in the last 24 hours, by the model that answered them and verdict ' +
    '(passed, failed); read from PostgreSQL, the same on every node (use max)',
  labelNames: ['model', 'verdict'] as const,
  registers: [registry],
});

const chatAuditNearQuarantine = new Gauge({
  name: `${PREFIX}chat_audit_solvers_near_quarantine`,
  help:
    'Solvers out of quarantine audited in the last 24 hours whose sequential test on chat ' +
    'audits stands at or above half its quarantine threshold, by the model of their latest ' +
    'audit; read from PostgreSQL, the same on every node (use max)',
  labelNames: ['model'] as const,
  registers: [registry],
});

const chatVerifications = new Gauge({
  name: `${PREFIX}chat_verifications_concluded`,
  help:
    'Verifications of client chats concluded in the last 24 hours, by the model checked and ' +
    'outcome: which of the three answers was the odd one out (client_odd, check_odd), all_agree, ' +
    'undecided, or why there was no verdict (skipped, unanswered, incomparable); read from ' +
    'PostgreSQL, the same on every node (use max)',
  labelNames: ['model', 'outcome'] as const,
  registers: [registry],
});

const scrapeErrors = new Counter({
  name: `${PREFIX}metrics_database_errors_total`,
  help: 'Scrapes whose queue figures could not be read from PostgreSQL (the gauges then keep their last values)',
  registers: [registry],
});

/**
 * Reads the queue, work-share, check-funding, chat audit and chat verification figures once per scrape
 * (six cheap statements), before the registry renders.
 */
async function refreshQueueFigures(): Promise<void> {
  const [db, trust] = (sources.dbs.entries().next().value as [Db, TrustPolicy | undefined] | undefined) ?? [];
  if (!db) return;
  try {
    const [figures, shares, funding, audits, verifications] = await Promise.all([
      queueFigures(db),
      workShareFigures(db),
      trust ? checkFunding(db, trust) : null,
      chatAuditFigures(db, CHAT_AUDIT_WINDOW_SECONDS),
      recentChatVerifications(db, CHAT_AUDIT_WINDOW_SECONDS),
    ]);
    chatVerifications.reset();
    for (const row of verifications) chatVerifications.labels(row.model, row.outcome).set(row.runs);
    // Models whose audits left the window drop out rather than stay at their last value.
    chatAuditsJudged.reset();
    for (const row of audits.verdicts) chatAuditsJudged.labels(row.model, row.verdict).set(row.audits);
    chatAuditNearQuarantine.reset();
    for (const row of audits.nearQuarantine) chatAuditNearQuarantine.labels(row.model).set(row.solvers);
    if (funding) {
      platformAvailable.set(Number(funding.available_points));
      checksUnfunded.set(funding.checks_unfunded ? 1 : 0);
      solversAwaitingChecks.set(funding.solvers_awaiting_checks);
    }
    for (const taskType of CAPABILITY_TASK_TYPES) {
      const row = figures.find((entry) => entry.task_type === taskType);
      tasksWaiting.labels(taskType).set(row?.waiting ?? 0);
      tasksAssigned.labels(taskType).set(row?.assigned ?? 0);
      freeSlots.labels(taskType).set(row?.free_slots ?? 0);
      const share = shares.find((entry) => entry.task_type === taskType);
      workSolvers.labels(taskType).set(share?.solvers_served ?? 0);
      workTopShare.labels(taskType).set(share?.top_share ?? 0);
      workFairness.labels(taskType).set(share?.fairness ?? 1);
    }
  } catch {
    scrapeErrors.inc();
  }
}

/** The Prometheus text exposition of this process's figures. */
export async function metricsText(): Promise<{ contentType: string; body: string }> {
  await refreshQueueFigures();
  return { contentType: registry.contentType, body: await registry.metrics() };
}
