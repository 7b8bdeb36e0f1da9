import type { Client } from '@temporalio/client';
import type { TaskWorkflowInput } from '../contract/workflows';
import type { Config } from '../config';
import { getBalance, PLATFORM_ACCOUNT_ID } from '../db/ledger';
import type { NotifyBus } from '../db/notify';
import type { Db } from '../db/pool';
import type { Logger } from '../logger';
import { launchTaskWorkflow, newTaskId } from './engine';
import { verificationSummary } from './workflow-summary';
import {
  markRedundantRunStarted,
  REDUNDANT_RUN_DRAWN_CHANNEL,
  skipUnstartedRedundantRuns,
  unstartedRedundantRuns,
  type UnstartedRedundantRun,
} from '../db/redundant';
import { redundantSearchTaskType, redundantWorkflowId } from '../trust/redundant';

/**
 * Starts the workflow of each redundant run sampled as its client task settled (docs/trust.md). The
 * settling transaction announces the run on REDUNDANT_RUN_DRAWN_CHANNEL; every worker hears it and
 * starts it. The workflow id is the client task's and is refused a second start, so the workers (and
 * the sweeps) starting one run at once start one workflow. A worker sweeps as it starts and every
 * REDUNDANT_RUN_SWEEP_SECONDS for runs no worker heard of (none was listening, or its start failed).
 */
export class RedundantRunStarter {
  // Runs skipped for want of platform points since the last sweep: the sweep reports them, once.
  private skippedUnfunded = 0;

  constructor(private readonly deps: { config: Config; db: Db; temporal: Client; logger: Logger }) {}

  /** Starts the runs announced on REDUNDANT_RUN_DRAWN_CHANNEL, as the transaction that drew each commits. */
  async listen(bus: NotifyBus): Promise<void> {
    await bus.subscribe(REDUNDANT_RUN_DRAWN_CHANNEL, (payload) => {
      const taskId = (payload as { task_id?: unknown } | undefined)?.task_id;
      if (typeof taskId !== 'string') return;
      this.start({ taskId }).catch((error) =>
        this.deps.logger.warn({ err: error, task_id: taskId }, 'redundant run not started; the sweep starts it'),
      );
    });
  }

  /**
   * Starts every run not started yet; reports once the runs skipped since the last sweep. Returns how many it
   * found.
   */
  async sweep(): Promise<number> {
    let found = 0;
    const BATCH = 200;
    for (;;) {
      const batch = await this.start({ limit: BATCH });
      found += batch;
      if (batch < BATCH) break;
    }
    if (this.skippedUnfunded > 0) {
      this.deps.logger.warn(
        { skipped: this.skippedUnfunded },
        'redundant runs skipped: the platform account has no points (POST /v1/admin/deposit for account_id platform)',
      );
      this.skippedUnfunded = 0;
    }
    return found;
  }

  /** Starts the workflows of unstarted runs (one client task's, or the oldest `limit`). Returns how many it found. */
  async start(options: { taskId?: string; limit?: number }): Promise<number> {
    const runs = await unstartedRedundantRuns(this.deps.db, options);
    if (runs.length === 0) return 0;
    // A platform account with nothing available pays for no run: those sampled are skipped, no workflow started.
    const platform = await getBalance(this.deps.db, PLATFORM_ACCOUNT_ID);
    if (!platform || Number(platform.available_points) <= 0) {
      this.skippedUnfunded += await skipUnstartedRedundantRuns(
        this.deps.db,
        runs.map((run) => run.task_id),
        'platform_balance',
      );
      return runs.length;
    }
    for (const run of runs) await this.startRun(run);
    return runs.length;
  }

  /**
   * Starts the task workflow of a run's second task: one attempt, behind client tasks; the workflow creates its
   * task.
   */
  private async startRun(run: UnstartedRedundantRun): Promise<void> {
    const { config, logger } = this.deps;
    const input: TaskWorkflowInput = {
      taskId: newTaskId(),
      taskType: run.task_type,
      // The most a run is held at; the step before its attempt sets its own cap (docs/trust.md, "Redundant runs").
      maxPricePoints: config.trust.checkPriceCeilingPoints,
      // How long the run may wait for a free slot of another solver and answer: the client task's timeout.
      timeoutSeconds: run.timeout_seconds,
      maxAttempts: 1,
      attemptTimeoutSeconds: config.attemptTimeoutSeconds,
      acceptTimeoutMs: config.acceptTimeoutMs,
      platform: { purpose: 'verification', clientTaskId: run.task_id, run: 'second' },
    };
    // A run is started once: a worker that read the row before another marked it started is refused,
    // even when the first run has already ended.
    const start = {
      workflowId: redundantWorkflowId(run.task_id),
      input,
      accountId: PLATFORM_ACCOUNT_ID,
      searchTaskType: redundantSearchTaskType(run.task_type),
      once: true,
      summary: verificationSummary(run.task_type, run.task_id),
    };
    if (await launchTaskWorkflow(this.deps, start)) {
      logger.info(
        { task_id: run.task_id, task_type: run.task_type, first_solver_id: run.first_solver_id },
        'redundant run started',
      );
    }
    await markRedundantRunStarted(this.deps.db, run.task_id);
  }
}
