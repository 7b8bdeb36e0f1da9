import type { ArtifactStore } from '../artifacts/store';
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import type { Config } from '../config';
import type { Db } from '../db/pool';
import {
  claimDelivery,
  deliveryIdOf,
  deliveryWorkflowId,
  findStrandedDeliveries,
  markDeliveryStarted,
  reopenFailedDelivery,
  type DueDelivery,
  type ReopenOutcome,
  type WebhookEvent,
} from '../db/webhooks';
import type { Logger } from '../logger';
import { recordWebhookWorkflowStarted } from '../metrics/metrics';
import { Semaphore } from '../solver/semaphore';
import type { WebhookDeliveryInput } from '../contract/workflows';
import type { WebhookSender } from '../tasks/handoffs';
import { webhookSummary } from '../tasks/workflow-summary';
import { attemptDelivery } from './attempt';

/** Sends a failed delivery again, on a client's request. */
export interface WebhookResender {
  resend(input: { taskId: string; accountId: string; event: WebhookEvent }): Promise<ReopenOutcome>;
}

// A delivery written this long ago and never claimed lost its committer between the commit and the claim.
export const UNCLAIMED_AFTER_SECONDS = 10;
// A delivery written this long before its turn for a slot is not claimed: it is left to the sweep, so
// that a claim never races the sweep's look at an unclaimed row.
const CLAIM_WITHIN_SECONDS = UNCLAIMED_AFTER_SECONDS / 2;
// A claimed delivery neither delivered nor handed to a workflow this long after its claim lost its
// claimer (or its workflow could not be started); well past one attempt's own timeout.
const CLAIM_GRACE_SECONDS = 60;
// First attempts one process makes at once; the others wait their turn, so that a burst of endings does
// not open a connection each.
export const WEBHOOK_DIRECT_CONCURRENCY = 32;

/**
 * Webhook deliveries: the first attempt of each made at once by the process that wrote it, with no
 * workflow when the receiver accepts it (the common case); the durable delivery workflow
 * (`webhook-<task id>-<event>`) only for one whose first attempt failed, that was stranded, or that
 * failed and its client sent again.
 */
export class WebhookDeliveries implements WebhookSender, WebhookResender {
  private readonly inFlight = new Set<Promise<void>>();
  // Bounds this process's concurrent first attempts (connections, sockets, pool use) in a burst of endings.
  private readonly slots: Semaphore;

  /** `claimant` names this process in the claims it makes (`api:<node id>`, `worker:<host>:<pid>`). */
  constructor(
    private readonly deps: {
      config: Config;
      db: Db;
      artifacts: ArtifactStore;
      temporal: Client;
      logger: Logger;
      claimant: string;
      directConcurrency?: number;
    },
  ) {
    this.slots = new Semaphore(deps.directConcurrency ?? WEBHOOK_DIRECT_CONCURRENCY);
  }

  send(deliveries: DueDelivery[] | undefined): void {
    for (const due of deliveries ?? []) {
      const sending = this.sendFirst(due)
        .catch((error) =>
          this.deps.logger.warn(
            { err: error, task_id: due.task_id },
            'webhook first attempt not made; the sweep hands it to a workflow',
          ),
        )
        .finally(() => this.inFlight.delete(sending));
      this.inFlight.add(sending);
    }
  }

  /**
   * Claims the delivery (once: no other process sends it directly) and makes its first attempt, when a
   * slot is free; a failed attempt hands the delivery to its workflow, which goes on from the second
   * with the backoff.
   */
  private async sendFirst(due: DueDelivery): Promise<void> {
    const release = await this.slots.acquire();
    try {
      const delivery = await claimDelivery(
        this.deps.db,
        deliveryIdOf(due.task_id, due.event),
        this.deps.claimant,
        CLAIM_WITHIN_SECONDS,
      );
      if (!delivery) return;
      const outcome = await attemptDelivery(this.deps, delivery, 'direct');
      if (outcome.result === 'failed') await this.startWorkflow(due, delivery.attempts + 1, 'first_attempt_failed');
    } finally {
      release();
    }
  }

  /**
   * Reopens a failed delivery (claimed by this process) and hands it to its workflow as a new one: a
   * whole retry window, the first attempt at once. A workflow not started is left to the sweep.
   */
  async resend(input: { taskId: string; accountId: string; event: WebhookEvent }): Promise<ReopenOutcome> {
    const reopened = await reopenFailedDelivery(this.deps.db, { ...input, claimedBy: this.deps.claimant });
    if (reopened.outcome === 'reopened') {
      await this.startWorkflow(reopened.delivery, 0, 'resent').catch((error) =>
        this.deps.logger.warn(
          { err: error, task_id: input.taskId },
          'resent webhook delivery not handed to its workflow; the sweep hands it on',
        ),
      );
    }
    return reopened;
  }

  /**
   * Starts a delivery's workflow. Idempotent (the workflow id is the task's and the event's), so the
   * sweep may start one its sender has started already.
   */
  async startWorkflow(
    due: DueDelivery,
    attemptsMade: number,
    reason: 'first_attempt_failed' | 'stranded' | 'resent',
  ): Promise<void> {
    const { config, temporal, db } = this.deps;
    const deliveryId = deliveryIdOf(due.task_id, due.event);
    const input: WebhookDeliveryInput = {
      deliveryId,
      retryForSeconds: config.webhookRetryForSeconds,
      attemptTimeoutMs: config.webhookTimeoutMs,
      attemptsMade,
    };
    try {
      await temporal.workflow.start('webhookDeliveryWorkflow', {
        taskQueue: config.taskQueue,
        workflowId: deliveryWorkflowId(due.task_id, due.event),
        args: [input],
        staticSummary: webhookSummary(due.event, due.task_id),
      });
      recordWebhookWorkflowStarted(reason);
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
    }
    await markDeliveryStarted(db, deliveryId);
  }

  /**
   * Crash recovery, run by the workers: hands to their workflows the pending deliveries nobody is
   * sending (never claimed, or claimed and neither delivered nor handed on within the grace). Returns
   * how many it found.
   */
  async sweep(): Promise<number> {
    const stranded = await findStrandedDeliveries(this.deps.db, {
      unclaimedSeconds: UNCLAIMED_AFTER_SECONDS,
      claimedSeconds: Math.max(CLAIM_GRACE_SECONDS, Math.ceil(this.deps.config.webhookTimeoutMs / 1000) * 3),
    });
    for (const delivery of stranded) {
      await this.startWorkflow(delivery, delivery.attempts, 'stranded').catch((error) =>
        this.deps.logger.error({ err: error, task_id: delivery.task_id }, 'webhook delivery workflow not started'),
      );
    }
    return stranded.length;
  }

  /** Waits for the first attempts in flight (at shutdown, before the pools close). */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.inFlight]);
  }
}
