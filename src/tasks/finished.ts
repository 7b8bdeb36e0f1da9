import type { NotifyBus } from '../db/notify';
import { TASK_FINISHED_CHANNEL } from '../db/tasks/finish';
import type { TerminalState } from '../contract/lifecycle';

// Enough to cover the moment between a task's start and its waiter registering, at any plausible rate.
const REMEMBERED = 4096;

/**
 * Learns that a task reached its terminal state as soon as that state commits in PostgreSQL (NOTIFY
 * from the completing transaction), before its workflow has closed. The last announcements are kept,
 * so a waiter that registers just after its task finished (a fast solver) still learns it.
 */
export class TaskFinishedWatch {
  private readonly waiting = new Map<string, Set<(status: TerminalState) => void>>();
  private readonly recent = new Map<string, TerminalState>();

  static async start(bus: NotifyBus): Promise<TaskFinishedWatch> {
    const watch = new TaskFinishedWatch();
    await bus.subscribe(TASK_FINISHED_CHANNEL, (payload) => {
      const { task_id: taskId, status } = payload as { task_id: string; status: TerminalState };
      watch.remember(taskId, status);
      for (const resolve of watch.waiting.get(taskId) ?? []) resolve(status);
    });
    return watch;
  }

  /** The task's terminal state once announced; `stop` forgets the waiter. */
  wait(taskId: string): { finished: Promise<TerminalState>; stop: () => void } {
    const known = this.recent.get(taskId);
    if (known) return { finished: Promise.resolve(known), stop: () => undefined };
    let resolve!: (status: TerminalState) => void;
    const finished = new Promise<TerminalState>((done) => {
      resolve = done;
    });
    let set = this.waiting.get(taskId);
    if (!set) this.waiting.set(taskId, (set = new Set()));
    set.add(resolve);
    return {
      finished,
      stop: () => {
        set.delete(resolve);
        if (set.size === 0) this.waiting.delete(taskId);
      },
    };
  }

  private remember(taskId: string, status: TerminalState) {
    this.recent.set(taskId, status);
    // Maps iterate in insertion order: the first key is the oldest.
    if (this.recent.size > REMEMBERED) this.recent.delete(this.recent.keys().next().value!);
  }
}
