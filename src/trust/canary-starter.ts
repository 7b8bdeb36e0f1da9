import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import { AccountIdAttribute, TaskStatusAttribute, TaskTypeAttribute, type CanaryWorkflowInput } from '../../workflows/contract';
import { readStrongModels, type Config } from '../config';
import { getBalance, PLATFORM_ACCOUNT_ID } from '../db/ledger';
import type { NotifyBus } from '../db/notify';
import type { Db } from '../db/pool';
import type { Logger } from '../logger';
import { newTaskId } from '../tasks/service';
import { CHAT_TASK_TYPE } from '../schemas/domain';
import { canaryHold, canarySearchTaskType, canaryWorkflowId, dueCanaries, servesPage, type DueCanary } from './canaries';
import { CANARY_DUE_CHANNEL } from './reputation';

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

/** Starts a canary workflow for each solver due one (or for one solver's due canaries). Returns how many it started (or found started). */
export async function startDueCanaries(deps: CanaryStartDeps, options: { solverId?: string } = {}): Promise<number> {
  // Without a public address, a node's own (loopback or private) address serves canary pages only
  // where solvers may fetch private networks: otherwise no canary page could be fetched (chat audits need none).
  const pages = Boolean(deps.config.publicBaseUrl) || deps.config.allowPrivateNetworks;
  const due = (await dueCanaries(deps.db, { solverId: options.solverId })).filter(({ taskType }) => pages || !servesPage(taskType));
  if (due.length === 0) return 0;
  // The platform account must be able to pay a canary's hold (CHECK_PRICE_CEILING_POINTS, every type).
  // None is started while it cannot (its workflow would end skipped): the solver stays due, and on
  // probation gets no client work, until the account is funded and a sweep starts it.
  const platform = await getBalance(deps.db, PLATFORM_ACCOUNT_ID);
  const affordable = platform && Number(platform.available_points) >= Number(canaryHold(deps.config)) ? due : [];
  if (affordable.length < due.length && options.solverId === undefined) {
    deps.logger.warn(
      { due: due.length, hold_points: canaryHold(deps.config), available_points: platform?.available_points ?? '0' },
      'canaries not started: the platform account cannot hold their price (POST /v1/admin/deposit for account_id platform)',
    );
  }
  for (const canary of affordable) await startCanary(deps, canary);
  return affordable.length;
}

async function startCanary(deps: CanaryStartDeps, { solverId, taskType, sent }: DueCanary): Promise<void> {
  const taskId = newTaskId();
  const input: CanaryWorkflowInput = {
    taskId,
    solverId,
    taskType,
    sent,
    maxPricePoints: canaryHold(deps.config),
    // A chat audit goes to the solver's strong-tier capability, matched by the allowlist like a client's strong chat.
    ...(taskType === CHAT_TASK_TYPE ? { strongModels: readStrongModels(deps.config) } : {}),
    timeoutSeconds: deps.config.defaultTaskTimeoutSeconds,
    attemptTimeoutSeconds: deps.config.attemptTimeoutSeconds,
    acceptTimeoutMs: deps.config.acceptTimeoutMs,
  };
  try {
    await deps.temporal.workflow.start('canaryWorkflow', {
      taskQueue: deps.config.taskQueue,
      workflowId: canaryWorkflowId(solverId, taskType, sent),
      args: [input],
      typedSearchAttributes: [
        { key: TaskTypeAttribute, value: canarySearchTaskType(taskType) },
        { key: AccountIdAttribute, value: PLATFORM_ACCOUNT_ID },
        { key: TaskStatusAttribute, value: 'queued' },
      ],
    });
  } catch (error) {
    // Another worker (or sweep) started this canary first.
    if (error instanceof WorkflowExecutionAlreadyStartedError) return;
    throw error;
  }
  deps.logger.info({ solver_id: solverId, task_type: taskType, task_id: taskId }, 'canary started');
}

/** Starts the canaries of each solver announced on CANARY_DUE_CHANNEL, as the announcing transaction commits. */
export async function listenForDueCanaries(deps: CanaryStartDeps, bus: NotifyBus): Promise<void> {
  await bus.subscribe(CANARY_DUE_CHANNEL, (payload) => {
    const solverId = (payload as { solver_id?: unknown } | undefined)?.solver_id;
    if (typeof solverId !== 'string') return;
    startDueCanaries(deps, { solverId }).catch((error) => deps.logger.warn({ err: error, solver_id: solverId }, 'canary not started; the sweep starts it'));
  });
}
