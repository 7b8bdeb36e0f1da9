import type { Client } from '@temporalio/client';
import type { ArtifactStore } from '../artifacts/store';
import type { Config } from '../config';
import type { ChatRelay } from '../chat/relay';
import type { AttemptStops } from '../dispatch/attempt-stops';
import type { NotifyBus } from '../db/notify';
import type { Db } from '../db/pool';
import type { Logger } from '../logger';
import type { MarketEvents } from './market-events';
import type { DomainGuard } from '../policy/guard';
import type { HandoffSender } from '../tasks/handoffs';
import type { TaskEngine } from '../tasks/engine';
import type { WebhookResender, WebhookSender } from '../webhooks/sender';

/** What the HTTP layer is given; built once by the API entry point. */
export interface AppDeps {
  config: Config;
  db: Db;
  logger: Logger;
  temporal: Client;
  nodeId: string;
  strongModels: () => string[];
  /** Every task write, with the effects due after its commit (src/tasks/engine.ts). */
  tasks: TaskEngine;
  /** Tells waiting workflows the slots handed to them (new capabilities, tasks queued). */
  handoffs: HandoffSender;
  /** Makes the first attempt of the webhook deliveries a task's ending wrote (a cancel before the workflow started), and resends a failed one. */
  webhooks: WebhookSender & WebhookResender;
  /** LISTEN/NOTIFY between API nodes (policy reloads, chat deltas, attempt stops). */
  bus: NotifyBus;
  relay: ChatRelay;
  stops: AttemptStops;
  /** The domain policy in force on this node (reloaded on every node together). */
  domainPolicy: DomainGuard;
  /** The console's live feed of queue snapshots and task endings (GET /v1/admin/events). */
  market: MarketEvents;
  /** Where results' screenshots and large page bodies are kept (src/artifacts/). */
  artifacts: ArtifactStore;
}
