import type { NotifyBus } from '../db/notify';

// Every node hears every stop: the node that decides does not know which node runs the task's attempt.
const CHANNEL = 'attempt_stop';

/**
 * Stops a task's running attempt at once, on whichever node it runs, when the task is settled elsewhere:
 * its chat client went away, or an admin completed it. The workflow cancels the attempt's activity too,
 * but an activity hears of that only at its next heartbeat to Temporal, which the SDK throttles to 80 % of
 * the heartbeat timeout (8 s here); until then the solver would go on working, and paying for tokens, for
 * nothing. The decision itself (signal or cancellation) goes to the workflow first, so that a stopped
 * attempt is never taken for a failed one and handed to another solver.
 */
export class AttemptStops {
  private readonly running = new Map<string, Set<() => void>>();

  constructor(private readonly bus: NotifyBus) {}

  async start(): Promise<void> {
    await this.bus.subscribe(CHANNEL, (payload) => {
      const taskId = (payload as { taskId?: unknown })?.taskId;
      if (typeof taskId === 'string') this.stopHere(taskId);
    });
  }

  /** Stops the task's attempts on every node. */
  async stop(taskId: string): Promise<void> {
    this.stopHere(taskId);
    await this.bus.publish(CHANNEL, { taskId });
  }

  /** Calls `stop` if the task's attempts are stopped, until the returned function is called. */
  onStop(taskId: string, stop: () => void): () => void {
    let set = this.running.get(taskId);
    if (!set) this.running.set(taskId, (set = new Set()));
    set.add(stop);
    return () => {
      set.delete(stop);
      if (set.size === 0 && this.running.get(taskId) === set) this.running.delete(taskId);
    };
  }

  private stopHere(taskId: string): void {
    const set = this.running.get(taskId);
    if (!set) return;
    this.running.delete(taskId);
    for (const stop of set) stop();
  }
}
