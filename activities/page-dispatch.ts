import type { Client } from '@temporalio/client';
import { isTerminalState } from '../src/contract/lifecycle';
import type { NotifyBus } from '../src/db/notify';
import { getTaskRow } from '../src/db/tasks/records';
import type { CapabilityTaskType } from '../src/schemas/domain';
import { pageAttemptChannel, type PageAttemptRequest } from '../src/dispatch/page-requests';
import { runDispatch } from './dispatch';
import type { NodeActivityDeps } from './deps';

/**
 * On an API node: runs the first attempts of crawl pages sent here (src/dispatch/page-requests.ts) as a
 * task's dispatch activity runs them, without a workflow: the result stored, the task completed and
 * settled by the same code. An attempt that fails hands the page to its task's ordinary workflow, given
 * that failure as its first attempt's outcome, which reassigns it (or ends the task) by the task rules.
 * An attempt lost with this node leaves the task without a started workflow, for the stranded-task sweep.
 */
export class PageAttempts {
  // Never aborted: nothing cancels these attempts but their task being settled elsewhere (a cancel).
  private readonly running = new AbortController();

  constructor(private readonly deps: NodeActivityDeps & { temporal: Client; bus: NotifyBus; nodeId: string }) {}

  async start(): Promise<void> {
    await this.deps.bus.subscribe(
      pageAttemptChannel(this.deps.nodeId),
      (payload) => void this.run(payload as PageAttemptRequest),
    );
  }

  private async run(request: PageAttemptRequest): Promise<void> {
    const { db, logger, config, payloads } = this.deps;
    try {
      payloads?.remember(request.taskId, request.payload);
      const report = await runDispatch(
        this.deps,
        {
          taskId: request.taskId,
          attemptId: request.assignment.attemptId,
          solverId: request.assignment.solverId,
          taskType: request.taskType as CapabilityTaskType,
          deadlineMs: request.deadlineMs,
          acceptTimeoutMs: config.acceptTimeoutMs,
        },
        this.running.signal,
      );
      if (report.ok) return;
      const task = await getTaskRow(db, request.taskId);
      // Cancelled meanwhile (the failure is the attempt stopped): nothing is left to do.
      if (!task || isTerminalState(task.status)) return;
      await this.deps.engine.start(task, { firstAssignment: request.assignment, firstAttemptReport: report });
    } catch (error) {
      logger.warn(
        { err: error, task_id: request.taskId },
        'page attempt not run to its end; the stranded-task sweep starts its workflow',
      );
    }
  }
}
