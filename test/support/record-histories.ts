/**
 * Records the workflow histories that test/workflows/replay.test.ts replays: the task, crawl and webhook
 * delivery workflows of a given version of the code, run through scripted scenarios on an embedded
 * Temporal dev server.
 *
 *   node --import tsx test/support/record-histories.ts <label> [<checkout> [<scenario>...]]
 *
 * `<checkout>` is a checkout of the version to record (default: this one), e.g. made with
 * `git worktree add /tmp/v <commit>` and node_modules linked into it. Histories are written to
 * test/fixtures/histories/<label>--<scenario>.json. Record a version before a change that adds or
 * removes a `patched()` marker, so the replay test proves the new code still runs its workflows; name
 * scenarios to record only those (e.g. the new branches of a change).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { temporal as proto } from '@temporalio/proto';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import { loadConfig } from '../../src/config';
import { resolveTemporalCli, startEmbeddedTemporal } from '../../src/embedded/temporal';
import { createLogger } from '../../src/logger';
import { solverReportedFailure } from '../../src/contract/lifecycle';
import { adminCompleteSignal, cancelTaskSignal, slotHandedSignal, thirdRunWorkflowId } from '../../src/contract/workflows';
import { SLICES_PER_RUN } from '../../workflows/crawl';
import { canaryInput, taskInput, untilCancelled, verificationInput, WorkflowHarness } from './workflow-harness';

export const HISTORIES_DIR = path.resolve(__dirname, '../fixtures/histories');

/**
 * A history as written here, ready to replay. (Stored as protobuf's plain JSON; the SDK's own JSON reader
 * needs the protobufjs its package pins, which npm may not hoist.)
 */
export const loadHistory = (json: unknown) => proto.api.history.v1.History.fromObject(json as object);

type Scenario = (harness: WorkflowHarness, taskId: string) => Promise<unknown>;

/** Each scenario takes the workflow down one of its branches, including every `patched()` marker's. */
export const SCENARIOS: Record<string, Scenario> = {
  'web-reassigned': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async (input) => (input.attemptId.endsWith('.a1') ? solverReportedFailure({ type: 'flaky', message: 'flaky' }, true, 0) : { ok: true, chunks: 0, status: 'completed' }),
    });
    await handle.result();
    return handle.fetchHistory();
  },
  'web-timed-out': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', taskInput(taskId, { timeoutSeconds: 1 }), {});
    await handle.result();
    return handle.fetchHistory();
  },
  'web-admin-completed': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: untilCancelled(),
    });
    await harness.dispatched();
    await handle.signal(adminCompleteSignal, { solverId: 'solver-admin', result: { results: [] } });
    await handle.result();
    return handle.fetchHistory();
  },
  // The `slot-handed-by-signal` marker: a task that finds no slot waits until one is handed to it (earlier
  // versions asked again after a pause, and find the slot reserved for them then).
  'web-queued': async (harness, taskId) => {
    const slot = harness.assignment(taskId, 1);
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {
      reserve: () => (harness.calls.reserved.length > 1 ? { assignment: slot } : { assignment: null, untriedOnline: 1, finishedAs: null, queued: true }),
    });
    while (harness.calls.reserved.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    await handle.signal(slotHandedSignal, { attemptNumber: 1, assignment: slot });
    await handle.result();
    return handle.fetchHistory();
  },
  'web-cancelled-running': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: untilCancelled(),
    });
    await harness.dispatched();
    await handle.signal(cancelTaskSignal);
    await handle.result();
    return handle.fetchHistory();
  },
  'web-cancelled-queued': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {});
    while (harness.calls.reserved.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
    await handle.signal(cancelTaskSignal);
    await handle.result();
    return handle.fetchHistory();
  },
  // The `target-failure-second-opinion` marker: a claim that the target failed, held against its solver,
  // gets another solver's opinion (earlier versions ended the task at the first claim).
  'web-target-failure': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async (input) =>
        input.attemptId.endsWith('.a1') ? solverReportedFailure({ type: 'connection_refused', message: 'refused' }, false, 0) : { ok: true, chunks: 0, status: 'completed' },
      targetVerdict: () => 'solver',
    });
    await handle.result();
    return handle.fetchHistory();
  },
  // The `platform-fault-not-counted` marker: an attempt lost with its node, no solver online just after;
  // the task waits for its solver to come back and is handed its slot (earlier versions failed it then).
  'web-platform-fault': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', taskInput(taskId, { maxAttempts: 2 }), {
      reserve: (input) => (input.attemptNumber === 1 ? { assignment: harness.assignment(taskId, 1) } : { assignment: null, untriedOnline: 0, finishedAs: null, queued: true }),
      dispatch: async (input) => {
        if (input.attemptId.endsWith('.a1')) throw ApplicationFailure.nonRetryable('node went away');
        return { ok: true, chunks: 0, status: 'completed' };
      },
    });
    while (harness.calls.reserved.length < 2) await new Promise((resolve) => setTimeout(resolve, 20));
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Ended already on versions that failed it: the signal finds no running workflow.
    await handle.signal(slotHandedSignal, { attemptNumber: 2, assignment: harness.assignment(taskId, 2, 'solver-1') }).catch(() => undefined);
    await handle.result();
    return handle.fetchHistory();
  },
  // Platform tasks: a canary of one solver, one attempt, created by the step before it.
  'canary-passed': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', canaryInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber, input.canaryFor) }),
    });
    await handle.result();
    return handle.fetchHistory();
  },
  // Queued for its solver, handed a slot by signal; its attempt fails, so it ends unanswered.
  'canary-unanswered': async (harness, taskId) => {
    const slot = harness.assignment(taskId, 1, 'solver-checked');
    const handle = await harness.start('taskWorkflow', canaryInput(taskId), {
      reserve: () => ({ assignment: null, untriedOnline: 1, finishedAs: null, queued: true }),
      dispatch: async () => solverReportedFailure({ type: 'flaky', message: 'flaky' }, true, 0),
    });
    while (harness.calls.reserved.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    await handle.signal(slotHandedSignal, { attemptNumber: 1, assignment: slot });
    await handle.result();
    return handle.fetchHistory();
  },
  'canary-skipped': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', canaryInput(taskId), { createCanary: () => ({ created: false, reason: 'not_due' }) });
    await handle.result();
    return handle.fetchHistory();
  },
  // The workflows canaries and verification runs ran as before they ran as the task workflow, kept for
  // those still running: recorded from a version before (label `pre-platform-tasks`).
  'legacy-canary': async (harness, taskId) => {
    const input = { taskId, solverId: 'solver-checked', taskType: 'proxy_fetch', sent: 0, maxPricePoints: '10', timeoutSeconds: 30, attemptTimeoutSeconds: 30, acceptTimeoutMs: 1000 };
    const handle = await harness.startLegacy('canaryWorkflow', input, {
      reserve: (reserve) => ({ assignment: harness.assignment(taskId, reserve.attemptNumber, 'solver-checked') }),
      dispatch: async () => solverReportedFailure({ type: 'flaky', message: 'flaky' }, true, 0),
    });
    await handle.result();
    return handle.fetchHistory();
  },
  'legacy-redundant': async (harness, taskId) => {
    const input = { clientTaskId: `${taskId}_client`, runTaskId: taskId, taskType: 'proxy_fetch', timeoutSeconds: 30, attemptTimeoutSeconds: 30, acceptTimeoutMs: 1000 };
    const handle = await harness.startLegacy('redundantRunWorkflow', input, {
      reserve: (reserve) => ({ assignment: harness.assignment(reserve.taskId, reserve.attemptNumber) }),
      verdict: (run) => (run === 'second' ? 'disagreed' : 'upheld'),
    });
    await handle.result();
    return handle.fetchHistory();
  },
  // Verification runs: the second is judged; a disagreement starts the third as a task workflow of its own.
  'verification-agreed': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', verificationInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
    });
    await handle.result();
    return handle.fetchHistory();
  },
  'verification-disagreed': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', verificationInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      verdict: (run) => (run === 'second' ? 'disagreed' : 'upheld'),
    });
    await handle.result();
    await harness.client.workflow.getHandle(thirdRunWorkflowId(`${taskId}_client`)).result();
    return handle.fetchHistory();
  },
  'verification-skipped': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', verificationInput(taskId), {
      reserve: () => ({ assignment: null, untriedOnline: 0, finishedAs: null }),
    });
    await handle.result();
    return handle.fetchHistory();
  },
  // A third run whose attempt fails concludes the dispute without a verdict.
  'verification-third-failed': async (harness, taskId) => {
    const handle = await harness.start('taskWorkflow', verificationInput(taskId, 'third'), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async () => solverReportedFailure({ type: 'crashed', message: 'worker crashed' }, false, 0),
    });
    await handle.result();
    return handle.fetchHistory();
  },
  // The `fence-lost-chat-attempt` marker: a chat attempt lost with its node, the client node asked.
  'chat-lost-attempt': async (harness, taskId) => {
    const stream = { clientNodeId: harness.nodeId, completionId: `chatcmpl-${taskId}` };
    const handle = await harness.start('chatCompletionWorkflow', taskInput(taskId, { taskType: 'chat_completion', stream }), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async (input) => {
        if (input.attemptId.endsWith('.a1')) throw ApplicationFailure.nonRetryable('node went away');
        return { ok: true, chunks: 1, status: 'completed' };
      },
      fence: () => 0,
    });
    await handle.result();
    return handle.fetchHistory();
  },
  // A crawl: discovery, then slices until one says the job is done.
  'crawl-done': async (harness, taskId) => {
    const handle = await harness.startJob('crawlWorkflow', { crawlId: taskId }, { crawlSlice: (slice) => ({ done: slice === 2 }) });
    await handle.result();
    return handle.fetchHistory();
  },
  // A crawl longer than a run's slices continues as new (this run's history), without discovery again.
  'crawl-continued': async (harness, taskId) => {
    const handle = await harness.startJob('crawlWorkflow', { crawlId: taskId }, { crawlSlice: (slice) => ({ done: slice > SLICES_PER_RUN }) });
    await handle.result();
    return harness.client.workflow.getHandle(handle.workflowId, handle.firstExecutionRunId).fetchHistory();
  },
  'crawl-seeded': async (harness, taskId) => {
    const handle = await harness.startJob('crawlWorkflow', { crawlId: taskId, seeded: true }, {});
    await handle.result();
    return handle.fetchHistory();
  },
  // A delivery whose first attempt its sender made: it waits out that attempt's backoff, is retried once
  // by Temporal, and is delivered.
  'webhook-delivered': async (harness, taskId) => {
    const input = { deliveryId: taskId, retryForSeconds: 60, attemptTimeoutMs: 1000, attemptsMade: 1 };
    const handle = await harness.startJob('webhookDeliveryWorkflow', input, {
      deliver: (attempt) => {
        if (attempt === 1) throw new Error('502 from the receiver');
        return 'delivered';
      },
    });
    await handle.result();
    return handle.fetchHistory();
  },
  // A receiver that refuses the delivery: no retry, the delivery recorded as failed. (No `attemptsMade`:
  // as deliveries started before their first attempt was made directly.)
  'webhook-refused': async (harness, taskId) => {
    const handle = await harness.startJob('webhookDeliveryWorkflow', { deliveryId: taskId, retryForSeconds: 60, attemptTimeoutMs: 1000 }, {
      deliver: () => {
        throw ApplicationFailure.nonRetryable('refused by the target', 'webhook_target_refused');
      },
    });
    await handle.result();
    return handle.fetchHistory();
  },
  // A receiver that keeps failing until the delivery's time is up (its schedule-to-close timeout).
  'webhook-out-of-time': async (harness, taskId) => {
    const handle = await harness.startJob('webhookDeliveryWorkflow', { deliveryId: taskId, retryForSeconds: 1, attemptTimeoutMs: 1000 }, {
      deliver: () => {
        throw new Error('502 from the receiver');
      },
    });
    await handle.result();
    return handle.fetchHistory();
  },
  // The `bill-delivered-on-cancel` marker: a chat's client goes away while its attempt runs; the workflow
  // waits for the attempt to stop (and keep what it delivered) before it ends the task.
  'chat-client-gone': async (harness, taskId) => {
    const stream = { clientNodeId: harness.nodeId, completionId: `chatcmpl-${taskId}` };
    const handle = await harness.start('chatCompletionWorkflow', taskInput(taskId, { taskType: 'chat_completion', stream }), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: untilCancelled(),
    });
    await harness.dispatched();
    await handle.cancel();
    await handle.result().catch(() => undefined);
    return handle.fetchHistory();
  },
};

async function main() {
  const [label, checkout = path.resolve(__dirname, '../..'), ...only] = process.argv.slice(2);
  if (!label) throw new Error('usage: record-histories.ts <label> [<checkout> [<scenario>...]]');
  const logger = createLogger('warn', 'record-histories');
  const config = loadConfig();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'record-histories-'));
  const temporal = await startEmbeddedTemporal({ cli: resolveTemporalCli(config.rootDir, config.temporalCli), dir, namespace: 'default', logger, ui: false });
  const bundle = await bundleWorkflowCode({ workflowsPath: path.join(checkout, 'workflows/index.ts') });
  const harness = await WorkflowHarness.start(temporal.address, bundle);
  fs.mkdirSync(HISTORIES_DIR, { recursive: true });
  try {
    for (const [name, scenario] of Object.entries(SCENARIOS).filter(([name]) => only.length === 0 || only.includes(name))) {
      const history = await scenario(harness, `task_${name.replace(/-/g, '_')}`);
      const file = path.join(HISTORIES_DIR, `${label}--${name}.json`);
      const json = proto.api.history.v1.History.toObject(proto.api.history.v1.History.fromObject(history as object), { longs: String, enums: String, bytes: String });
      // What is written must load and replay on the code that made it.
      await Worker.runReplayHistory({ workflowBundle: bundle }, loadHistory(json));
      fs.writeFileSync(file, `${JSON.stringify(json, null, 1)}\n`);
      console.log(`wrote ${path.relative(process.cwd(), file)}`);
    }
  } finally {
    await harness.close();
    await temporal.stop();
  }
}

if (require.main === module) {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
