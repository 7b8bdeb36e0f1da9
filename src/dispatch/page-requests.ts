import type { NotifyBus } from '../db/notify';
import type { Assignment } from '../contract/lifecycle';

/**
 * A crawl's page task sent to its first solver without a workflow (docs/crawl.md, "Throughput"): the
 * crawl's activity matched it as it created it, and asks the API node holding the solver's socket, by
 * NOTIFY on that node's channel, to run the attempt. A request lost on the way leaves the task without a
 * started workflow, which the worker's stranded-task sweep starts (TaskEngine.sweepUnstarted, src/tasks/engine.ts).
 */
export interface PageAttemptRequest {
  taskId: string;
  taskType: string;
  assignment: Assignment;
  payload: Record<string, unknown>;
  deadlineMs: number;
}

export const pageAttemptChannel = (nodeId: string) =>
  `pages_${nodeId.toLowerCase().replace(/[^a-z0-9_]/g, '_')}`.slice(0, 63);

export async function sendPageAttempt(bus: NotifyBus, request: PageAttemptRequest): Promise<void> {
  await bus.publish(pageAttemptChannel(request.assignment.nodeId), request);
}
