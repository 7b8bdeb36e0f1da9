import type { ActivityDeps, NodeActivityDeps } from './deps';
import { createCanaryActivities } from './canaries';
import { createChatStreamActivities } from './chat-stream';
import { createCrawlActivities } from './crawl';
import { createDispatchActivities } from './dispatch';
import { createRedundantRunActivities } from './redundant';
import { createTaskActivities } from './tasks';
import { createWebhookActivities } from './webhooks';

export type { ActivityDeps, NodeActivityDeps } from './deps';

/** Activities of the workflow worker: built by a factory; the worker entry point owns the pools they use. */
export function createActivities(deps: ActivityDeps) {
  return {
    async echo(message: string): Promise<string> {
      return message;
    },
    ...createTaskActivities(deps),
    ...createCanaryActivities(deps),
    ...createRedundantRunActivities(deps),
    ...createWebhookActivities(deps),
    ...createCrawlActivities(deps),
  };
}

/** Activities of an API node's own task queue: they reach the solver sockets this node holds. */
export function createNodeActivities(deps: NodeActivityDeps) {
  return { ...createDispatchActivities(deps), ...createChatStreamActivities(deps) };
}

export type Activities = ReturnType<typeof createActivities>;
export type NodeActivities = ReturnType<typeof createNodeActivities>;
