import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import {
  forgetHandoff,
  forgetOrphanHandoffs,
  handedAttemptOrphaned,
  unsentHandoffs,
  type Handoff,
} from '../db/matching';
import type { Db } from '../db/pool';
import type { TrustPolicy } from '../db/reputation';
import type { DueDelivery } from '../db/webhooks';
import { closeAttempt } from '../db/tasks/attempts';
import type { Logger } from '../logger';
import { slotHandedSignal } from '../contract/workflows';

/** Tells waiting workflows the slots handed to them, after the commit that handed them (docs/queue.md). */
export interface HandoffSender {
  /** Sends in the background; never throws (an unsent handoff stays in the outbox for the sweep). */
  deliver(handoffs: Handoff[] | undefined): void;
}

/** Makes the first attempt of the deliveries a finishing transaction wrote, after its commit. */
export interface WebhookSender {
  /** Sends in the background; never throws (a delivery not sent stays in the outbox for the sweep). */
  send(deliveries: DueDelivery[] | undefined): void;
}

/** What sends a handed slot's task at once, on the API node holding the solver's socket (EarlyAttempts). */
export interface EarlyHandoffs {
  /** True when the task went to its solver; its workflow's activity then takes the attempt over. */
  startHanded(handoff: Handoff): boolean;
  abandon(attemptId: string): void;
}

export class SlotHandoffs implements HandoffSender {
  private early?: EarlyHandoffs;

  constructor(private readonly deps: { db: Db; temporal: Client; logger: Logger; trust: TrustPolicy }) {}

  /**
   * On an API node: a slot handed here to a solver whose socket is here has its task sent as the
   * workflow is told, which saves the slot the workflow's round trip (docs/queue.md, "Telling the workflow").
   */
  sendEarlyWith(early: EarlyHandoffs): void {
    this.early = early;
  }

  deliver(handoffs: Handoff[] | undefined): void {
    for (const handoff of handoffs ?? []) {
      // Before the signal: the workflow's activity must find the attempt running, never send it itself.
      const startedEarly = this.early?.startHanded(handoff) ?? false;
      this.send(handoff, startedEarly).catch((error) =>
        this.deps.logger.warn({ err: error, task_id: handoff.taskId }, 'slot handoff not sent; the sweep sends it'),
      );
    }
  }

  /**
   * Signals the workflow and forgets the outbox row. A workflow that is gone (finished, or its task's
   * workflow never started) cannot use the slot: an attempt sent early is cancelled at its solver, and
   * when the task still counts as running with a started workflow, the attempt is closed, which hands
   * the slot on; a workflow not started yet finds the attempt itself when it asks for it.
   */
  async send(handoff: Handoff, startedEarly = false): Promise<void> {
    const { db, temporal } = this.deps;
    try {
      await temporal.workflow.getHandle(handoff.workflowId).signal(slotHandedSignal, {
        attemptNumber: handoff.attemptNumber,
        assignment: handoff.assignment,
        ...(startedEarly ? { startedEarly } : {}),
      });
    } catch (error) {
      if (!(error instanceof WorkflowNotFoundError)) throw error;
      this.early?.abandon(handoff.assignment.attemptId);
      if (await handedAttemptOrphaned(db, handoff.assignment.attemptId)) {
        this.deps.logger.warn({ task_id: handoff.taskId }, 'slot handed to a workflow that is gone; handing it on');
        const { handoffs } = await closeAttempt(db, this.deps.trust, {
          attemptId: handoff.assignment.attemptId,
          outcome: 'cancelled',
        });
        this.deliver(handoffs);
      }
    }
    await forgetHandoff(db, handoff.assignment.attemptId);
  }

  /** Sends handoffs whose sender died between the commit and the signal. Returns how many it sent. */
  async sweep(olderThanSeconds: number): Promise<number> {
    await forgetOrphanHandoffs(this.deps.db);
    const unsent = await unsentHandoffs(this.deps.db, olderThanSeconds);
    let sent = 0;
    for (const handoff of unsent) {
      try {
        await this.send(handoff);
        sent += 1;
      } catch (error) {
        this.deps.logger.warn({ err: error, task_id: handoff.taskId }, 'slot handoff not sent');
      }
    }
    return sent;
  }
}
