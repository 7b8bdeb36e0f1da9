import { ActivityFailure, isCancellation, proxyActivities } from '@temporalio/workflow';
import type { NodeActivities } from '../activities';
import type { CapabilityTaskType } from '../src/schemas/domain';
import { attemptFailed, type Assignment, type AttemptReport } from '../src/contract/lifecycle';
import { nodeTaskQueue } from '../src/contract/workflows';

/**
 * The one attempt of a platform task started before platform tasks ran as the task workflow (the
 * canary and redundant-run workflows, kept for those): dispatched on the node holding the
 * solver's socket, within the attempt timeout and what is left of the deadline. A node that cannot run
 * the activity is reported as `node_unavailable`, like a client task's attempt.
 */
export async function dispatchSingleAttempt(
  input: { taskId: string; taskType: CapabilityTaskType; attemptTimeoutSeconds: number; acceptTimeoutMs: number },
  assignment: Assignment,
  deadline: number,
): Promise<AttemptReport> {
  const timeoutMs = Math.min(input.attemptTimeoutSeconds * 1000, Math.max(deadline - Date.now(), 1000));
  const node = proxyActivities<NodeActivities>({
    taskQueue: nodeTaskQueue(assignment.nodeId),
    scheduleToStartTimeout: '15 seconds',
    startToCloseTimeout: timeoutMs + 2000,
    heartbeatTimeout: '10 seconds',
    retry: { maximumAttempts: 1 },
  });
  try {
    return await node.dispatchAttempt({
      taskId: input.taskId,
      attemptId: assignment.attemptId,
      solverId: assignment.solverId,
      taskType: input.taskType,
      deadlineMs: Date.now() + timeoutMs,
      acceptTimeoutMs: input.acceptTimeoutMs,
    });
  } catch (error) {
    if (isCancellation(error) || !(error instanceof ActivityFailure)) throw error;
    return attemptFailed('node_unavailable', String(error.cause?.message ?? error.message), 0);
  }
}
