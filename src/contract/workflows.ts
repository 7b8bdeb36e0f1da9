/**
 * Names shared by the workflows and the code that starts or signals them: task queues, signals,
 * queries and workflow ids. Importable from workflow code (no I/O here).
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { Assignment, AttemptFailed, ErrorBody, TaskState, TerminalState } from './lifecycle';

/** Each API node runs a worker on its own queue: activities that must reach a solver's socket go there. */
export const nodeTaskQueue = (nodeId: string) => `node-${nodeId}`;

export const taskWorkflowId = (taskId: string) => `task-${taskId}`;
/** A chat completion's workflow id is its OpenAI-style completion id, so ops find what clients quote. */
export const chatWorkflowId = (taskId: string) => `chatcmpl-${taskId.replace(/^chat_/, '')}`;

export interface AdminCompletion {
  solverId: string;
  result: Record<string, unknown>;
}
export const adminCompleteSignal = defineSignal<[AdminCompletion]>('adminComplete');

/** A slot handed to the task while it waited in the queue: it becomes this attempt. */
export interface SlotHanded {
  attemptNumber: number;
  assignment: Assignment;
  /** The node that handed the slot sent the task to its solver already; the dispatch activity takes it over. */
  startedEarly?: boolean;
}
export const slotHandedSignal = defineSignal<[SlotHanded]>('slotHanded');

/**
 * The node holding this attempt's solver socket is gone (its process and its database sessions ended):
 * the attempt is lost at once, rather than when its dispatch activity's heartbeat lapses.
 */
export interface AttemptNodeLost {
  attemptId: string;
  nodeId: string;
}
export const attemptNodeLostSignal = defineSignal<[AttemptNodeLost]>('attemptNodeLost');

/** The task's client cancelled it: the workflow stops its attempt and ends it `cancelled`. */
export const cancelTaskSignal = defineSignal('cancelTask');
export const taskStatusQuery = defineQuery<TaskState>('status');

export const TaskTypeAttribute = defineSearchAttributeKey('TaskType', SearchAttributeType.KEYWORD);
export const AccountIdAttribute = defineSearchAttributeKey('AccountId', SearchAttributeType.KEYWORD);
export const TaskStatusAttribute = defineSearchAttributeKey('TaskStatus', SearchAttributeType.KEYWORD);

export interface TaskWorkflowInput {
  taskId: string;
  taskType: string;
  maxPricePoints: string;
  timeoutSeconds: number;
  maxAttempts: number;
  attemptTimeoutSeconds: number;
  acceptTimeoutMs: number;
  /** Set for chat: only strong-tier capabilities for these models are eligible. */
  strongModels?: string[];
  /** Set for chat: deltas go to this node, which serves the client's stream. */
  stream?: { clientNodeId: string; completionId: string };
  /** Attempt 1, when it was matched as the task was created. */
  firstAssignment?: Assignment;
  /** Attempt 1 went to its solver as the task was created; its dispatch activity takes it over. */
  firstAttemptStartedEarly?: boolean;
  /**
   * Attempt 1 ran without a workflow (a crawl's page, docs/crawl.md "Throughput") and failed thus: the
   * workflow takes the task over from that outcome.
   */
  firstAttemptReport?: AttemptFailed;
  /**
   * A platform task (docs/trust.md): a step before its attempt creates the task (and whatever it is
   * checked against) and says whom it may go to; a step after it gives the verdict. Started with
   * `maxAttempts` 1. Absent for a client's task.
   */
  platform?: PlatformTask;
}

/** A canary of one solver (docs/trust.md, "Canaries"): its task id is chosen by whoever starts it. */
export interface CanaryTask {
  purpose: 'canary';
  solverId: string;
  /** Canaries of that type the solver was sent before this one (its workflow id numbers them). */
  sent: number;
}
/**
 * A run of a client's task again (docs/trust.md, "Verified client tasks"): the second, by a verifier or
 * another solver, or the third that breaks the tie when two solvers that are not verifiers disagreed.
 */
export interface VerificationTask {
  purpose: 'verification';
  /** The client's task, whose result the run's is compared with. */
  clientTaskId: string;
  run: 'second' | 'third';
}
export type PlatformTask = CanaryTask | VerificationTask;

/**
 * The workflow ids of a client task's verification runs, the second and the third, and their TaskType search
 * attribute value.
 */
export const redundantWorkflowId = (clientTaskId: string) => `redundant-${clientTaskId}`;
export const thirdRunWorkflowId = (clientTaskId: string) => `redundant-${clientTaskId}-third`;
export const redundantSearchTaskType = (taskType: string) => `redundant_${taskType}`;
/**
 * The Temporal UI's line for a verification run (`second` or `third`) of a client task
 * (src/tasks/workflow-summary.ts has the others).
 */
export const verificationSummary = (taskType: string, clientTaskId: string, run: 'second' | 'third' = 'second') =>
  `${taskType} verification run${run === 'third' ? ' (third)' : ''} · platform · of ${clientTaskId}`;

/** Whom a platform task's attempt may go to, as the step before its attempt found (matching's options). */
export interface PlatformMatch {
  /** A canary: only this solver's slots fit it, and it is served before client tasks. */
  canaryFor?: string;
  /** Only solvers marked verifiers take it. */
  verifiersOnly?: boolean;
  /** It takes only a slot that no waiting client task fits. */
  behindClientTasks?: boolean;
  /** Solvers it must not go to (the ones whose result it checks). */
  excludedSolverIds?: string[];
  /** Its price cap, when the step before chose it (a verification run's). */
  maxPricePoints?: string;
  /** The strong-tier models it may go to, when the step before chose them (a chat verification's: the model checked). */
  strongModels?: string[];
}

/** What the step before a platform task's attempt did: the task is created, or why it is not. */
export type PlatformTaskPrepared = { created: true; match: PlatformMatch } | { created: false; reason: string };

export interface TaskWorkflowResult {
  taskId: string;
  status: TerminalState;
  error?: ErrorBody;
}

/** A platform task whose step before created nothing (e.g. no longer due, or the platform cannot pay). */
export interface SkippedTaskResult {
  taskId: string;
  status: 'skipped';
  reason: string;
}

export interface WebhookDeliveryInput {
  deliveryId: string;
  /** How long the delivery is retried before it is given up (WEBHOOK_RETRY_FOR_SECONDS). */
  retryForSeconds: number;
  attemptTimeoutMs: number;
  /**
   * Attempts made before the workflow started (its first, by the process that finished the task): the
   * workflow goes on from the next with the backoff those attempts have used up. Absent in the
   * histories of deliveries started before first attempts were made directly: 0.
   */
  attemptsMade?: number;
}

/**
 * The input of the canary workflow, which canaries ran as before they ran as the task workflow
 * (`platform`); kept while workflows started then may still run (workflows/index.ts).
 */
export interface CanaryWorkflowInput {
  taskId: string;
  solverId: string;
  taskType: string;
  /** Canaries of that type the solver was sent before this one (its workflow id numbers them). */
  sent: number;
  maxPricePoints: string;
  /** A chat audit: the strong-tier allowlist, so that it goes to the solver's strong capability. */
  strongModels?: string[];
  timeoutSeconds: number;
  attemptTimeoutSeconds: number;
  acceptTimeoutMs: number;
}

export interface CanaryWorkflowResult {
  taskId: string;
  /**
   * `skipped`: no canary was created (no longer due, e.g. another start sent it; no page address; or the
   * platform cannot pay).
   */
  status: TerminalState | 'skipped';
  reason?: string;
}

/**
 * The input of the redundant-run workflow, which verification runs ran as before they ran as the task
 * workflow (`platform`); kept while workflows started then may still run (workflows/index.ts).
 */
export interface RedundantRunWorkflowInput {
  /** The client's task, whose result the second one is compared with. */
  clientTaskId: string;
  /** The platform's task that runs it again (chosen by whoever starts the workflow). */
  runTaskId: string;
  taskType: string;
  /** How long the run may wait for a free slot of another solver and answer (the client task's timeout). */
  timeoutSeconds: number;
  attemptTimeoutSeconds: number;
  acceptTimeoutMs: number;
}

export interface RedundantRunWorkflowResult {
  clientTaskId: string;
  /** The run's verdict, or why it has none. */
  status: 'agreed' | 'disagreed' | 'incomparable' | 'unanswered' | 'skipped' | 'refuted' | 'upheld' | 'compared';
  reason?: string;
}

/** A crawl or batch scrape (docs/crawl.md); its workflow id names the job. */
export const crawlWorkflowId = (crawlId: string) => `crawl-${crawlId}`;

export interface CrawlWorkflowInput {
  crawlId: string;
  /** Discovery (robots.txt, sitemaps) is done: set when the workflow continues as new. */
  seeded?: boolean;
}

export interface CrawlWorkflowResult {
  crawlId: string;
}
