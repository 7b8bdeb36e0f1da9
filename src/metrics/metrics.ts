import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { TERMINAL_STATES } from '../contract/lifecycle';
import { CAPABILITY_TASK_TYPES } from '../schemas/domain';

/**
 * The Prometheus figures of this process (an API node, a worker, or `npm start` running both), served at
 * /metrics. Labels are bounded vocabularies only: route patterns, task types, final states, relay paths,
 * never ids. A task's creation and its final state are each recorded once, in the process whose
 * statement committed them, so summing a counter over every node counts each task once.
 */

export const registry = new Registry();
collectDefaultMetrics({ register: registry });
// Gauges named like counters fail `promtool check metrics`; each is the sum of its by-type gauge
// (`sum without (type) (nodejs_active_handles)`).
for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'])
  registry.removeSingleMetric(name);

export const PREFIX = 'marketplace_';

// Web tasks take milliseconds to a minute; chat streams up to CHAT_TIMEOUT_SECONDS.
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
// Relay hops are in-process (microseconds) or one NOTIFY round (about a millisecond).
const RELAY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

export const httpRequests = new Counter({
  name: `${PREFIX}http_requests_total`,
  help: 'HTTP requests answered, by method, route pattern and status',
  labelNames: ['method', 'route', 'status'] as const,
  registers: [registry],
});

export const httpDuration = new Histogram({
  name: `${PREFIX}http_request_duration_seconds`,
  help: 'Time from a request arriving to its response finishing, by method, route pattern and status',
  labelNames: ['method', 'route', 'status'] as const,
  buckets: LATENCY_BUCKETS,
  registers: [registry],
});

const tasksCreated = new Counter({
  name: `${PREFIX}tasks_created_total`,
  help: 'Tasks created (points held), by task type; a retry with the same idempotency key is not a new task',
  labelNames: ['task_type'] as const,
  registers: [registry],
});

const tasksFinished = new Counter({
  name: `${PREFIX}tasks_finished_total`,
  help: 'Tasks that reached their final state, by task type and state (completed, failed, timed_out, cancelled)',
  labelNames: ['task_type', 'status'] as const,
  registers: [registry],
});

const attemptsReassigned = new Counter({
  name: `${PREFIX}attempts_reassigned_total`,
  help:
    'Attempts given to another solver than the previous attempt of the same task (a task put ' +
    'back in line, or given to the same solver again, is not counted)',
  labelNames: ['task_type'] as const,
  registers: [registry],
});

const earlyAttempts = new Counter({
  name: `${PREFIX}early_attempts_total`,
  help:
    'Attempts sent to their solver by the API node before their workflow asked (occasion: ' +
    "created with their task, or handed a freed slot), by how they left that node's keeping " +
    '(taken_over by their dispatch activity, or abandoned)',
  labelNames: ['occasion', 'end'] as const,
  registers: [registry],
});

const webhookAttempts = new Counter({
  name: `${PREFIX}webhook_delivery_attempts_total`,
  help:
    'Attempts to deliver a webhook, by event, result (delivered, failed: the receiver answered ' +
    'other than 2xx or could not be reached, refused: the target is not allowed) and path ' +
    '(direct: the first attempt, by the process that finished the task; workflow: by the ' +
    'delivery workflow)',
  labelNames: ['event', 'result', 'path'] as const,
  registers: [registry],
});

const webhookWorkflows = new Counter({
  name: `${PREFIX}webhook_delivery_workflows_started_total`,
  help:
    'Delivery workflows started, by reason (first_attempt_failed; stranded: found by the ' +
    'recovery sweep, its sender having died or failed to start it; resent: a failed delivery ' +
    'its client asked to send again)',
  labelNames: ['reason'] as const,
  registers: [registry],
});

const chatFirstToken = new Histogram({
  name: `${PREFIX}chat_time_to_first_token_seconds`,
  help: 'Time from a chat completion request being accepted on its API node to its first delta reaching that node',
  buckets: LATENCY_BUCKETS,
  registers: [registry],
});

const chatRelay = new Histogram({
  name: `${PREFIX}chat_relay_seconds`,
  help:
    'Time a chat delta takes from the node holding the solver to the node holding the client ' +
    '(path: local or notify)',
  labelNames: ['path'] as const,
  buckets: RELAY_BUCKETS,
  registers: [registry],
});

for (const taskType of CAPABILITY_TASK_TYPES) {
  // Every series exists from the start at 0, so rate() and alerts see the first task too.
  tasksCreated.labels(taskType).inc(0);
  attemptsReassigned.labels(taskType).inc(0);
  for (const status of TERMINAL_STATES) tasksFinished.labels(taskType, status).inc(0);
}
for (const occasion of ['created', 'handed'])
  for (const end of ['taken_over', 'abandoned']) earlyAttempts.labels(occasion, end).inc(0);
for (const reason of ['first_attempt_failed', 'stranded', 'resent']) webhookWorkflows.labels(reason).inc(0);

const resultsPurged = new Counter({
  name: `${PREFIX}results_purged_total`,
  help: 'Task results removed by the retention purge (RESULT_RETENTION_SECONDS after their task ended)',
  registers: [registry],
});

const artifactsDeleted = new Counter({
  name: `${PREFIX}artifacts_deleted_total`,
  help: 'Artifacts (screenshots, large page bodies) deleted from the artifact store with their purged results',
  registers: [registry],
});

const crawlDocumentsPurged = new Counter({
  name: `${PREFIX}crawl_documents_purged_total`,
  help:
    'Crawl and batch-scrape page documents, and the job webhook bodies carrying them, emptied ' +
    'by the retention purge',
  registers: [registry],
});

const idempotencyKeysReleased = new Counter({
  name: `${PREFIX}idempotency_keys_released_total`,
  help: 'Idempotency keys released by the retention purge, 24 hours after their task was created',
  registers: [registry],
});

// A purge run is one batch (milliseconds) up to its cap of batches (seconds).
const PURGE_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const purgeDuration = new Histogram({
  name: `${PREFIX}retention_purge_duration_seconds`,
  help: 'Time one run of the retention purge took (every batch of results and idempotency keys it removed)',
  buckets: PURGE_BUCKETS,
  registers: [registry],
});

// The hooks below are called once each, where the event is committed.

/** A task was created (its row and hold committed). */
export const recordTaskCreated = (taskType: string) => tasksCreated.labels(taskType).inc();

/** A task reached its final state (the transaction that finished it committed). */
export const recordTaskFinished = (taskType: string, status: string) => tasksFinished.labels(taskType, status).inc();

/** An attempt after the first was given to another solver than the task's previous attempt. */
export const recordAttemptReassigned = (taskType: string) => attemptsReassigned.labels(taskType).inc();

/**
 * An attempt sent early was taken over by its dispatch activity, or abandoned without one
 * (src/dispatch/early-attempts.ts).
 */
export const recordEarlyAttempt = (occasion: 'created' | 'handed', end: 'taken_over' | 'abandoned') =>
  earlyAttempts.labels(occasion, end).inc();

export type WebhookAttemptPath = 'direct' | 'workflow';

/** One attempt to deliver a webhook, counted by the process that made it (an API node or a worker). */
export const recordWebhookAttempt = (
  event: string,
  result: 'delivered' | 'failed' | 'refused',
  path: WebhookAttemptPath,
) => webhookAttempts.labels(event, result, path).inc();

/** A delivery was handed to its workflow (once per delivery: a start refused as a duplicate is not counted). */
export const recordWebhookWorkflowStarted = (reason: 'first_attempt_failed' | 'stranded' | 'resent') =>
  webhookWorkflows.labels(reason).inc();

/** One run of the retention purge, counted by the worker that ran it (rows it changed, artifacts it deleted). */
export function recordRetentionPurge(run: {
  results: number;
  artifacts: number;
  documents: number;
  idempotencyKeys: number;
  seconds: number;
}) {
  resultsPurged.inc(run.results);
  artifactsDeleted.inc(run.artifacts);
  crawlDocumentsPurged.inc(run.documents);
  idempotencyKeysReleased.inc(run.idempotencyKeys);
  purgeDuration.observe(run.seconds);
}

export const observeChatFirstToken = (seconds: number) => chatFirstToken.observe(seconds);

export const observeChatRelay = (path: 'local' | 'notify', seconds: number) => chatRelay.labels(path).observe(seconds);
