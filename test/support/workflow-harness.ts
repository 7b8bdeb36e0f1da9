import crypto from 'node:crypto';
import { Context } from '@temporalio/activity';
import type { Client, WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { NativeConnection, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { temporal } from '@temporalio/proto';
import pino from 'pino';
import type { DispatchInput } from '../../activities/dispatch';
import type { ReserveAttemptInput } from '../../src/db/matching';
import type { AttemptEnd, Reservation } from '../../src/db/tasks/attempts';
import type { Completion } from '../../src/tasks/finish';
import type { CanaryCreated } from '../../src/trust/canaries';
import type { RedundantRunCreated } from '../../src/trust/redundant';
import type { Assignment, AttemptReport, RedundantRunState, TargetFailureVerdict, TaskFailure, TaskState } from '../../src/contract/lifecycle';
import { createTemporalClient } from '../../src/temporal/connection';
import { installTemporalRuntime } from '../../src/temporal/runtime';
import {
  nodeTaskQueue,
  type CanaryWorkflowInput,
  type CrawlWorkflowInput,
  type RedundantRunWorkflowInput,
  type TaskWorkflowInput,
  type TaskWorkflowResult,
  type WebhookDeliveryInput,
} from '../../src/contract/workflows';

/**
 * The task workflow on the real Temporal dev server with its activities replaced by scripts: each test
 * says what matching, the node's dispatch and the client's node answer, and reads back what the
 * workflow asked of them. On the dev server deadlines are real, and kept to a second or two; on the
 * time-skipping test server (test/support/time-skipping.ts, whose client a test passes in) they pass
 * as fast as the workflow reaches them.
 */

export interface Script {
  /** Matching: the assignment for an attempt, or none (no solver free). */
  reserve?(input: ReserveAttemptInput): Reservation;
  /** The node's dispatch of an attempt. Throwing fails the activity (a node lost, as the workflow sees it). */
  dispatch?(input: DispatchInput): Promise<AttemptReport>;
  /** How many deltas of a lost chat attempt reached the client. */
  fence?(input: { completionId: string; attemptId: string }): number | null;
  /** How a claim that the target failed was judged as its attempt closed (none by default). */
  targetVerdict?(input: AttemptEnd): TargetFailureVerdict | null;
  /** A canary's creation, the step before its attempt (created by default). */
  createCanary?(input: { taskId: string; solverId: string }): CanaryCreated;
  /** A verification run's creation, second or third (created by default, by any solver but `solver-checked`). */
  createRun?(input: { clientTaskId: string; runTaskId: string }, run: 'second' | 'third'): RedundantRunCreated;
  /** The verdict on a verification run's result (`agreed` by default). */
  verdict?(run: 'second' | 'third'): RedundantRunState;
  /** A crawl's slice, the `slice`th of the job (done at the first by default). */
  crawlSlice?(slice: number): { done: boolean };
  /** One attempt of a webhook delivery, the `attempt`th (delivered by default). Throwing fails it. */
  deliver?(attempt: number): 'delivered' | 'already_finished';
}

export interface Calls {
  reserved: ReserveAttemptInput[];
  dispatched: DispatchInput[];
  closed: AttemptEnd[];
  finished: TaskFailure[];
  completedByAdmin: Completion[];
  fenced: string[];
  /** Canaries created (their task ids), and those marked unanswered. */
  canaries: string[];
  unanswered: string[];
  /** What the verification activities were asked, in order (`<activity> <client task id>`). */
  verification: string[];
  /** What the crawl and webhook activities were asked, in order (`<activity> <crawl or delivery id>`). */
  jobs: string[];
}

const NODE_ID = 'node-under-test';

export function taskInput(taskId: string, overrides: Partial<TaskWorkflowInput> = {}): TaskWorkflowInput {
  return { taskId, taskType: 'proxy_fetch', maxPricePoints: '10', timeoutSeconds: 30, maxAttempts: 3, attemptTimeoutSeconds: 30, acceptTimeoutMs: 1000, ...overrides };
}

/** A canary of solver `solver-checked`, as its starter starts the task workflow (src/tasks/canary-starter.ts). */
export function canaryInput(taskId: string, overrides: Partial<TaskWorkflowInput> = {}): TaskWorkflowInput {
  return taskInput(taskId, { maxAttempts: 1, platform: { purpose: 'canary', solverId: 'solver-checked', sent: 0 }, ...overrides });
}

/** A verification run of client task `<taskId>_client`, as its starter starts the task workflow (src/tasks/redundant-starter.ts). */
export function verificationInput(taskId: string, run: 'second' | 'third' = 'second'): TaskWorkflowInput {
  return taskInput(taskId, { maxAttempts: 1, platform: { purpose: 'verification', clientTaskId: `${taskId}_client`, run } });
}

/**
 * A dispatch that runs (heartbeating) until Temporal cancels it, as a solver at work would, then calls
 * `onCancelled` and reports the cancellation.
 */
export function untilCancelled(onCancelled: () => void = () => undefined): () => Promise<AttemptReport> {
  return async () => {
    const context = Context.current();
    const beat = setInterval(() => context.heartbeat(), 200);
    try {
      await new Promise((resolve) => context.cancellationSignal.addEventListener('abort', resolve));
      onCancelled();
      throw context.cancellationSignal.reason;
    } finally {
      clearInterval(beat);
    }
  };
}

/** The verification runs' bookkeeping, scripted (src/trust/redundant.ts's activities). */
function verificationStubs(me: () => WorkflowHarness) {
  const created = (run: 'second' | 'third') => async (input: { clientTaskId: string; runTaskId: string }): Promise<RedundantRunCreated> => {
    me().calls.verification.push(`create-${run} ${input.clientTaskId}`);
    return (
      me().script.createRun?.(input, run) ?? { created: true, runTaskId: input.runTaskId, maxPricePoints: '1', firstSolverId: 'solver-checked', ...(run === 'third' ? { excludedSolverIds: ['solver-checked', 'solver-1'] } : {}) }
    );
  };
  const judged = (run: 'second' | 'third') => async (input: { clientTaskId: string }): Promise<RedundantRunState> => {
    me().calls.verification.push(`judge-${run} ${input.clientTaskId}`);
    return me().script.verdict?.(run) ?? 'agreed';
  };
  const ended = (what: string) => async (input: { clientTaskId: string }) => {
    me().calls.verification.push(`${what} ${input.clientTaskId}`);
  };
  return {
    createRedundantRunTask: created('second'),
    createThirdRunTask: created('third'),
    judgeRedundantRun: judged('second'),
    judgeThirdRun: judged('third'),
    endRedundantRun: ended('end'),
    concludeDispute: ended('conclude'),
  };
}

/** Runs workflows of one bundle on their own task queues (one per harness), against stub activities. */
export class WorkflowHarness {
  readonly calls: Calls = { reserved: [], dispatched: [], closed: [], finished: [], completedByAdmin: [], fenced: [], canaries: [], unanswered: [], verification: [], jobs: [] };
  script: Script = {};
  private running: Promise<void>[] = [];
  private constructor(
    private readonly connection: NativeConnection,
    readonly client: Client,
    private readonly workers: Worker[],
    private readonly taskQueue: string,
    private readonly nodeQueue: string,
    private readonly ownsClient: boolean,
  ) {}

  /** `client`: the one to start workflows with (closed by its owner), instead of one of its own. */
  static async start(temporalAddress: string, bundle: WorkflowBundleWithSourceMap | { codePath: string }, options: { client?: Client } = {}): Promise<WorkflowHarness> {
    const logger = pino({ level: 'warn' });
    installTemporalRuntime(logger);
    const connection = await NativeConnection.connect({ address: temporalAddress });
    const client = options.client ?? (await createTemporalClient(temporalAddress, 'default'));
    // The harness is created before the workers, whose activities call into it.
    const holder: { harness?: WorkflowHarness } = {};
    const me = () => holder.harness!;
    const taskQueue = `workflow-test-${crypto.randomBytes(4).toString('hex')}`;
    const nodeQueue = nodeTaskQueue(`${NODE_ID}-${taskQueue}`);
    const workflows = await Worker.create({
      connection,
      taskQueue,
      workflowBundle: bundle,
      activities: {
        async reserveAttempt(input: ReserveAttemptInput) {
          me().calls.reserved.push(input);
          return me().script.reserve?.(input) ?? { assignment: null, untriedOnline: 1, finishedAs: null };
        },
        async closeAttempt(input: AttemptEnd) {
          me().calls.closed.push(input);
          return { closed: true, targetVerdict: me().script.targetVerdict?.(input) ?? null };
        },
        async finishTaskWithoutResult(input: { taskId: string } & TaskFailure) {
          me().calls.finished.push({ status: input.status, error: input.error });
          return { applied: true, status: input.status };
        },
        async completeTask(input: { taskId: string; completion: Completion }) {
          me().calls.completedByAdmin.push(input.completion);
          return { applied: true, status: 'completed' satisfies TaskState };
        },
        async createCanary(input: { taskId: string; solverId: string }): Promise<CanaryCreated> {
          me().calls.canaries.push(input.taskId);
          return me().script.createCanary?.(input) ?? { created: true, taskId: input.taskId };
        },
        async markCanaryUnanswered(input: { taskId: string }) {
          me().calls.unanswered.push(input.taskId);
        },
        ...verificationStubs(me),
        async seedCrawl(input: { crawlId: string }) {
          me().calls.jobs.push(`seedCrawl ${input.crawlId}`);
        },
        async runCrawlSlice(input: { crawlId: string; budget: number }) {
          const calls = me().calls.jobs;
          calls.push(`runCrawlSlice ${input.crawlId}`);
          return me().script.crawlSlice?.(calls.filter((call) => call.startsWith('runCrawlSlice')).length) ?? { done: true };
        },
        async deliverWebhook(input: { deliveryId: string }) {
          const calls = me().calls.jobs;
          calls.push(`deliverWebhook ${input.deliveryId}`);
          return me().script.deliver?.(calls.filter((call) => call.startsWith('deliverWebhook')).length) ?? 'delivered';
        },
        async failWebhookDelivery(input: { deliveryId: string }) {
          me().calls.jobs.push(`failWebhookDelivery ${input.deliveryId}`);
        },
      },
    });
    const node = await Worker.create({
      connection,
      taskQueue: nodeQueue,
      activities: {
        async dispatchAttempt(input: DispatchInput): Promise<AttemptReport> {
          me().calls.dispatched.push(input);
          const dispatch = me().script.dispatch;
          if (!dispatch) return { ok: true, chunks: 0, status: 'completed' };
          return dispatch(input);
        },
        async fenceChatAttempt(input: { completionId: string; attemptId: string }) {
          me().calls.fenced.push(input.attemptId);
          return me().script.fence?.(input) ?? 0;
        },
      },
    });
    const harness = new WorkflowHarness(connection, client, [workflows, node], taskQueue, nodeQueue, !options.client);
    holder.harness = harness;
    harness.running = [workflows.run(), node.run()];
    return harness;
  }

  /** The node id whose queue this harness's dispatch stub serves (assignments must name it). */
  get nodeId() {
    return this.nodeQueue.replace(/^node-/, '');
  }

  assignment(taskId: string, attemptNumber: number, solverId = `solver-${attemptNumber}`): Assignment {
    return { attemptId: `${taskId}.a${attemptNumber}`, solverId, nodeId: this.nodeId, pricePoints: '1', billingType: 'per_request', marginalCost: '0', modelName: 'm' };
  }

  /** Starts a workflow with a fresh script and fresh call records. */
  async start(workflow: 'taskWorkflow' | 'chatCompletionWorkflow', input: TaskWorkflowInput, script: Script): Promise<WorkflowHandle> {
    return this.startAny(workflow, input.taskId, input, script);
  }

  /** Starts the canary or redundant-run workflow that platform tasks ran as before (kept for those still running). */
  async startLegacy(workflow: 'canaryWorkflow', input: CanaryWorkflowInput, script: Script): Promise<WorkflowHandle>;
  async startLegacy(workflow: 'redundantRunWorkflow', input: RedundantRunWorkflowInput, script: Script): Promise<WorkflowHandle>;
  async startLegacy(workflow: string, input: CanaryWorkflowInput | RedundantRunWorkflowInput, script: Script): Promise<WorkflowHandle> {
    return this.startAny(workflow, 'taskId' in input ? input.taskId : input.clientTaskId, input, script);
  }

  /** Starts a crawl or a webhook delivery. */
  async startJob(workflow: 'crawlWorkflow', input: CrawlWorkflowInput, script: Script): Promise<WorkflowHandleWithFirstExecutionRunId>;
  async startJob(workflow: 'webhookDeliveryWorkflow', input: WebhookDeliveryInput, script: Script): Promise<WorkflowHandleWithFirstExecutionRunId>;
  async startJob(workflow: string, input: CrawlWorkflowInput | WebhookDeliveryInput, script: Script): Promise<WorkflowHandleWithFirstExecutionRunId> {
    return this.startAny(workflow, 'crawlId' in input ? input.crawlId : input.deliveryId, input, script);
  }

  private async startAny(workflow: string, id: string, input: object, script: Script): Promise<WorkflowHandleWithFirstExecutionRunId> {
    this.script = script;
    for (const list of Object.values(this.calls)) list.length = 0;
    return this.client.workflow.start(workflow, { taskQueue: this.taskQueue, workflowId: `${id}-${crypto.randomBytes(3).toString('hex')}`, args: [input] });
  }

  async run(workflow: 'taskWorkflow' | 'chatCompletionWorkflow', input: TaskWorkflowInput, script: Script): Promise<{ result: TaskWorkflowResult; history: temporal.api.history.v1.IHistory }> {
    const handle = await this.start(workflow, input, script);
    const result = (await handle.result()) as TaskWorkflowResult;
    return { result, history: await handle.fetchHistory() };
  }

  /** Resolves once the workflow has dispatched an attempt. */
  async dispatched(): Promise<void> {
    while (this.calls.dispatched.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
  }

  async close(): Promise<void> {
    for (const worker of this.workers) if (worker.getState() === 'RUNNING') worker.shutdown();
    await Promise.allSettled(this.running);
    if (this.ownsClient) await this.client.connection.close();
    await this.connection.close();
  }
}
