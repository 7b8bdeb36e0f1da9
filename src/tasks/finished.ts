import type { NotifyBus } from '../db/notify';
import { TASK_FINISHED_CHANNEL } from '../db/tasks';
import type { TaskState } from '../schemas/domain';

/**
 * Learns that a task reached its terminal state as soon as that state commits in PostgreSQL (NOTIFY
 * from the completing transaction), before its workflow has closed. Waiting for the workflow's result
 * stays the fallback, so a missed notification only costs time.
 */
export class TaskFinishedWatch {
  private readonly waiting = new Map<string, Set<(status: TaskState) => void>>();

  static async start(bus: NotifyBus): Promise<TaskFinishedWatch> {
    const watch = new TaskFinishedWatch();
    await bus.subscribe(TASK_FINISHED_CHANNEL, (payload) => {
      const { task_id: taskId, status } = payload as { task_id: string; status: TaskState };
      for (const resolve of watch.waiting.get(taskId) ?? []) resolve(status);
    });
    return watch;
  }

  /** The task's terminal state once announced; `stop` forgets the waiter. */
  wait(taskId: string): { finished: Promise<TaskState>; stop: () => void } {
    let resolve!: (status: TaskState) => void;
    const finished = new Promise<TaskState>((done) => {
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
}
