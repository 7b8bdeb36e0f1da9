import type { Client } from '@temporalio/client';
import type { TaskWorkflowInput } from '../contract/workflows';
import { readStrongModels, type Config } from '../config';
import { getBalance, PLATFORM_ACCOUNT_ID, PLATFORM_FUNDED_CHANNEL } from '../db/ledger';
import type { NotifyBus } from '../db/notify';
import type { Db } from '../db/pool';
import type { Logger } from '../logger';
import { launchTaskWorkflow, newTaskId } from './engine';
import { canarySummary } from './workflow-summary';
import { CHAT_TASK_TYPE } from '../schemas/domain';
import { dueCanaries, type DueCanary } from '../db/canaries';
import { canarySearchTaskType, canaryWorkflowId } from '../trust/canaries';
import { CANARY_DUE_CHANNEL, probationReservePoints } from '../db/reputation';

/**
 * Starts canary workflows as solvers become due them (docs/trust.md). The transaction that makes a
 * solver due one (an attempt's end, a canary's verdict, a connection, capabilities, a cleared
 * quarantine) announces it on CANARY_DUE_CHANNEL; every worker hears it, looks at that solver and
 * starts what is due. The workflow id numbers the solver's canaries, so the workers (and the sweeps)
 * starting one canary at once create one workflow.
 */

export interface CanaryStartDeps {
  config: Config;
  db: Db;
  temporal: Client;
  logger: Logger;
}

/**
 * Starts a canary workflow for each solver due one (or for one solver's due canaries). Returns how many it
 * started (or found started).
 */
export async function startDueCanaries(deps: CanaryStartDeps, options: { solverId?: string } = {}): Promise<number> {
  // Page canaries are due only where solvers can reach canary pages (activeCanaryTypes).
  const due = await dueCanaries(deps.db, deps.config.trust, { solverId: options.solverId });
  if (due.length === 0) return 0;
  // The platform account must be able to pay a canary's hold (its check price), and a probation check
  // leave the reserve beyond it (PROBATION_RESERVE_CHECKS). None is started while it cannot (its
  // workflow would end skipped): the solver stays due, and on probation gets no client work, until the
  // account is funded and a deposit's announcement or a sweep starts it.
  const platform = await getBalance(deps.db, PLATFORM_ACCOUNT_ID);
  let available = Number(platform?.available_points ?? 0);
  const reserve = Number(probationReservePoints(deps.config.trust));
  const affordable: DueCanary[] = [];
  for (const canary of platform ? due : []) {
    if (available < Number(canary.hold) + (canary.probation ? reserve : 0)) continue;
    affordable.push(canary);
    available -= Number(canary.hold);
  }
  if (affordable.length < due.length) warnUnfunded(deps, due.length - affordable.length, available);
  for (const canary of affordable) await startCanary(deps, canary);
  return affordable.length;
}

// With probation on by default, an unfunded platform account keeps every new solver from client work: said, once
// a minute at most.
const UNFUNDED_WARNING_MS = 60_000;
let lastUnfundedWarning = 0;
function warnUnfunded(deps: CanaryStartDeps, count: number, available: number): void {
  if (Date.now() - lastUnfundedWarning < UNFUNDED_WARNING_MS) return;
  lastUnfundedWarning = Date.now();
  deps.logger.warn(
    { canaries: count, platform_available_points: available },
    'canaries not started: the platform account cannot pay for them, and solvers on probation ' +
      'get no client work until it can; fund it with POST /v1/admin/deposit (account_id ' +
      '"platform")',
  );
}

/**
 * Starts the task workflow of a due canary: one attempt, its solver only; the workflow creates the canary and
 * its task.
 */
async function startCanary(deps: CanaryStartDeps, { solverId, taskType, sent, hold }: DueCanary): Promise<void> {
  // A chat audit is a client's chat on the wire: a chat_ id, the chat's deadline for the task and its attempt.
  const chat = taskType === CHAT_TASK_TYPE;
  const taskId = newTaskId(chat ? 'chat' : 'task');
  const input: TaskWorkflowInput = {
    taskId,
    taskType,
    maxPricePoints: hold,
    timeoutSeconds: chat ? deps.config.chatTimeoutSeconds : deps.config.defaultTaskTimeoutSeconds,
    maxAttempts: 1,
    attemptTimeoutSeconds: chat ? deps.config.chatTimeoutSeconds : deps.config.attemptTimeoutSeconds,
    acceptTimeoutMs: deps.config.acceptTimeoutMs,
    // A chat audit goes to the solver's strong-tier capability, matched by the allowlist like a client's strong chat.
    ...(chat ? { strongModels: readStrongModels(deps.config) } : {}),
    platform: { purpose: 'canary', solverId, sent },
  };
  const workflowId = canaryWorkflowId(solverId, taskType, sent);
  // Another worker (or sweep) may have started this canary first: its start is refused.
  if (
    !(await launchTaskWorkflow(deps, {
      workflowId,
      input,
      accountId: PLATFORM_ACCOUNT_ID,
      searchTaskType: canarySearchTaskType(taskType),
      summary: canarySummary(taskType, solverId),
    }))
  )
    return;
  deps.logger.info({ solver_id: solverId, task_type: taskType, task_id: taskId }, 'canary started');
}

/**
 * Starts the canaries of each solver announced on CANARY_DUE_CHANNEL, as the announcing transaction
 * commits, and every due canary as a deposit to the platform account commits (PLATFORM_FUNDED_CHANNEL):
 * those put off while it could not pay start then, not at the next sweep.
 */
export async function listenForDueCanaries(deps: CanaryStartDeps, bus: NotifyBus): Promise<void> {
  await bus.subscribe(CANARY_DUE_CHANNEL, (payload) => {
    const solverId = (payload as { solver_id?: unknown } | undefined)?.solver_id;
    if (typeof solverId !== 'string') return;
    startDueCanaries(deps, { solverId }).catch((error) =>
      deps.logger.warn({ err: error, solver_id: solverId }, 'canary not started; the sweep starts it'),
    );
  });
  await bus.subscribe(PLATFORM_FUNDED_CHANNEL, () => {
    startDueCanaries(deps).catch((error) =>
      deps.logger.warn(
        { err: error },
        'canaries not started after the platform account was funded; the sweep starts them',
      ),
    );
  });
}
