import type { ArtifactStore } from '../artifacts/store';
import type { Config } from '../config';
import type { ChatRelay } from '../chat/relay';
import type { Logger } from '../logger';
import type { MarketEvents } from '../services/market-events';
import type { Services } from '../services';
import type { Readiness } from '../services/readiness';
import type { DomainGuard } from '../guard/domain-guard';
import type { TaskEngine } from '../tasks/engine';
import type { WebhookResender } from '../webhooks/sender';

/**
 * What the HTTP layer is given; built once by the API entry point. It holds no database pool, Temporal
 * client or notification bus: tasks go through the engine, everything else through the services.
 */
export interface AppDeps extends Services {
  config: Config;
  logger: Logger;
  nodeId: string;
  strongModels: () => string[];
  /** Every task write, with the effects due after its commit (src/tasks/engine.ts). */
  tasks: TaskEngine;
  /** Resends a failed webhook delivery. */
  webhooks: WebhookResender;
  relay: ChatRelay;
  /** The domain policy in force on this node (reloaded on every node together). */
  domainPolicy: DomainGuard;
  /** The console's live feed of queue snapshots and task endings (GET /v1/admin/events). */
  market: MarketEvents;
  /** Where results' screenshots and large page bodies are kept (src/artifacts/). */
  artifacts: ArtifactStore;
  /** Whether this node can serve: GET /ready. */
  readiness: Readiness;
}
