import type { ArtifactStore } from '../src/artifacts/store';
import type { Config } from '../src/config';
import type { CrawlRunner } from '../src/crawl/runner';
import type { Db } from '../src/db/pool';
import type { ChatRelay } from '../src/chat/relay';
import type { AttemptStops } from '../src/dispatch/attempt-stops';
import type { EarlyAttempts } from '../src/dispatch/early-attempts';
import type { SolverHub } from '../src/dispatch/hub';
import type { Logger } from '../src/logger';
import type { RecentPayloads } from '../src/tasks/recent-payloads';
import type { TaskEngine } from '../src/tasks/engine';

export interface ActivityDeps {
  config: Config;
  db: Db;
  logger: Logger;
  /** Every task write, with the effects due after its commit (src/tasks/engine.ts). */
  engine: TaskEngine;
  /** Where results' screenshots and large page bodies are written as the results are stored. */
  artifacts: ArtifactStore;
  /** Runs the crawl workflows' activities (a process that runs workflows has one). */
  crawls?: CrawlRunner;
}

export interface NodeActivityDeps extends ActivityDeps {
  hub: SolverHub;
  relay: ChatRelay;
  /** Stops this node's attempts of a task settled elsewhere (a chat client gone, an admin completion). */
  stops: AttemptStops;
  /** Payloads of tasks this node just created (its first attempts need not read them back). */
  payloads?: RecentPayloads;
  /**
   * Attempts this node sent before their workflow asked (src/dispatch/early-attempts.ts), for their activities
   * to take over.
   */
  earlyAttempts?: EarlyAttempts;
}
