import { setTimeout as delay } from 'node:timers/promises';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { attemptNodeLostSignal } from '../contract/workflows';
import { awaitPresenceEnd, isNodeLive, liveNodeIds, NODE_STARTED_CHANNEL, removeGoneNode } from '../db/node-presence';
import type { NotifyBus } from '../db/notify';
import type { Db } from '../db/pool';
import type { Logger } from '../logger';

// A node whose presence is not held now (reconnecting its presence connection, whose back-off reaches
// 5 s) or whose other sessions live on is looked at again after this; its heartbeat keeps it listed.
const LOOK_AGAIN_MS = 3000;

/**
 * Tells a task's workflow the moment the API node holding its attempt's solver socket is gone, so the
 * attempt is taken as lost (a platform fault: not counted against the solver) and the task goes to
 * another solver at once, not when the dispatch activity's 10 s heartbeat lapses. Each worker follows
 * every live node through its presence (src/db/node-presence.ts), one waiting connection per node; the
 * node that is gone also leaves matching. A node that stops cleanly leaves matching itself and ends its
 * attempts as `node_shutdown`: nothing is told then. Whatever this misses, the heartbeat still catches.
 */
export class NodeWatch {
  private readonly followed = new Map<string, AbortController>();
  private closed = false;

  constructor(
    private readonly deps: { databaseUrl: string; db: Db; temporal: Client; bus: NotifyBus; logger: Logger },
  ) {}

  async start(): Promise<void> {
    await this.deps.bus.subscribe(NODE_STARTED_CHANNEL, (payload) => {
      const nodeId = (payload as { nodeId?: unknown } | undefined)?.nodeId;
      if (typeof nodeId === 'string') this.follow(nodeId);
    });
    // Announcements sent while the bus was down are lost: the listed nodes are read again.
    this.deps.bus.onReconnect(() => void this.followListed());
    await this.followListed();
  }

  close(): void {
    this.closed = true;
    for (const following of this.followed.values()) following.abort();
  }

  private async followListed(): Promise<void> {
    try {
      for (const nodeId of await liveNodeIds(this.deps.db)) this.follow(nodeId);
    } catch (error) {
      // As a worker starts before any API process has migrated the database: the nodes that start later
      // announce themselves, and a reconnected bus reads the list again.
      this.deps.logger.debug({ err: error }, 'could not read the API nodes to watch');
    }
  }

  private follow(nodeId: string): void {
    if (this.closed || this.followed.has(nodeId)) return;
    const following = new AbortController();
    this.followed.set(nodeId, following);
    void this.watch(nodeId, following.signal)
      .catch((error) => {
        if (!following.signal.aborted) this.deps.logger.warn({ err: error, node_id: nodeId }, 'node watch failed');
      })
      .finally(() => {
        if (this.followed.get(nodeId) === following) this.followed.delete(nodeId);
      });
  }

  private async watch(nodeId: string, signal: AbortSignal): Promise<void> {
    for (;;) {
      const seen = await awaitPresenceEnd(this.deps.databaseUrl, nodeId, signal).catch((error: unknown) => {
        if (signal.aborted) throw error;
        this.deps.logger.debug({ err: error, node_id: nodeId }, 'node watch connection failed');
        return 'absent' as const;
      });
      if (seen === 'gone') return this.gone(nodeId);
      await delay(LOOK_AGAIN_MS, undefined, { signal });
      // Gone before anyone saw its sessions end, or stopped cleanly: its listing lapses, as matching's does.
      if (!(await isNodeLive(this.deps.db, nodeId))) return;
    }
  }

  private async gone(nodeId: string): Promise<void> {
    const removed = await removeGoneNode(this.deps.db, nodeId);
    if (!removed) return;
    this.deps.logger.warn(
      { node_id: nodeId, attempts: removed.attempts.length },
      'API node gone: its attempts are lost',
    );
    await Promise.all(
      removed.attempts.map(({ attemptId, workflowId }) =>
        this.deps.temporal.workflow
          .getHandle(workflowId)
          .signal(attemptNodeLostSignal, { attemptId, nodeId })
          .catch((error: unknown) => {
            // A workflow that ended meanwhile needs no telling; any other failure leaves it to the heartbeat.
            if (!(error instanceof WorkflowNotFoundError))
              this.deps.logger.warn(
                { err: error, workflow_id: workflowId },
                'could not tell a workflow its node is gone',
              );
          }),
      ),
    );
  }
}
