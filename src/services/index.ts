import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import type { ArtifactStore } from '../artifacts/store';
import { PageCache } from '../compat/page-cache';
import type { Config } from '../config';
import { crawlWorkflowId, type CrawlWorkflowInput } from '../contract/workflows';
import { cancelTasks } from '../crawl/runner';
import { countAddressRequest } from '../db/address-limits';
import {
  createAccount,
  createApiKey,
  findAccount,
  findAccountByApiKey,
  listApiKeys,
  revokeApiKey,
  updateApiKey,
  updateSettings,
} from '../db/accounts';
import {
  activeCrawls,
  crawlByIdempotencyKey,
  crawlCost,
  crawlCounts,
  crawlDocuments,
  crawlErrors,
  createCrawl,
  finishCrawl,
  getCrawl,
  runningPageTasks,
} from '../db/crawls';
import {
  committedToTasks,
  costOfTasks,
  deposit,
  getBalance,
  ledgerHistory,
  ledgerSummary,
  taskLedger,
} from '../db/ledger';
import { onlineSolvers, recentAttemptsOf, taskAttempts } from '../db/market-view';
import type { Db } from '../db/pool';
import type { TrustPolicy } from '../db/reputation';
import { countKeyedRequest, resetRateLimit, simulateRateLimit } from '../db/rate-limits';
import { canHoldEstimates, listCapabilities, replaceCapabilities, solverStats } from '../db/solvers';
import { pingDatabase, queueStatus, statusCounts } from '../db/status';
import { checkFunding } from '../db/check-funding';
import { findTasks, listTasks } from '../db/task-listing';
import { getTaskRecord, getTaskRow } from '../db/tasks/records';
import { idempotencyKeyReused } from '../db/tasks/create';
import {
  accountWebhook,
  deleteAccountWebhook,
  deliveryLog,
  rotateWebhookSecret,
  setAccountWebhook,
  webhookSecret,
} from '../db/webhooks';
import type { TaskEngine } from '../tasks/engine';
import { crawlSummary } from '../tasks/workflow-summary';
import { canaryPageAt, chatAuditsOf } from '../trust/canaries';
import { earningsOf } from '../trust/escrow';
import {
  clearQuarantine,
  confirmQuarantine,
  heldEarnings,
  listQuarantines,
  quarantinesOf,
  reputationOf,
} from '../db/quarantines';
import { disagreementsOf } from '../db/redundant';
import { usageInflationsOf } from '../db/usage-inflations';
import { setVerifier, verifierSince } from '../db/verifiers';
import { bindDb } from './bind';

export interface ServicesDeps {
  config: Config;
  db: Db;
  temporal: Client;
  /** Makes the effects due after a commit (TaskEngine.afterCommit). */
  engine: TaskEngine;
  /** Where cached pages' large bodies are read back from (the tasks' results' artifacts). */
  artifacts: ArtifactStore;
}

/** Whether a backing service answers: `ok`, or the error it gave. */
const reachable = (probe: Promise<unknown>): Promise<string> =>
  probe.then(() => 'ok').catch((error: Error) => `error: ${error.message}`);

/**
 * What the HTTP layer reads and writes through besides the task engine, built once by the API entry
 * point: the statements it needs with the database handle bound, and the writes whose commit has effects
 * to make after it (slots handed on and webhook deliveries, made by the engine; workflows to start).
 */
export function createServices({ config, db, temporal, engine, artifacts }: ServicesDeps) {
  return {
    /** Pages fetched before, served to a scrape within its maxAge (docs/crawl.md, "Page cache"). */
    pageCache: new PageCache({ db, artifacts }),
    accounts: {
      ...bindDb(db, {
        createAccount,
        findAccount,
        findAccountByApiKey,
        updateSettings,
        createApiKey,
        updateApiKey,
        listApiKeys,
        revokeApiKey,
        accountWebhook,
        setAccountWebhook,
        deleteAccountWebhook,
        webhookSecret,
        rotateWebhookSecret,
      }),
      /** A solver's pay not vested yet (the process's trust policy says how long pay vests). */
      earningsOf: (accountId: string) => earningsOf(db, config.trust, accountId),
    },
    ledger: bindDb(db, {
      getBalance,
      deposit,
      costOfTasks,
      committedToTasks,
      ledgerHistory,
      ledgerSummary,
      taskLedger,
    }),
    /** Reads of tasks beside the engine's: lists, the console's views, webhook logs. */
    taskViews: bindDb(db, {
      listTasks,
      findTasks,
      getTaskRow,
      getTaskRecord,
      taskAttempts,
      deliveryLog,
      idempotencyKeyReused,
    }),
    solvers: {
      ...bindDb(db, { listCapabilities, solverStats, recentAttemptsOf, onlineSolvers }),
      /**
       * Whether the account can hold fixed points plus tasks at the lowest estimate an online solver asks
       * (src/db/solvers.ts).
       */
      canHoldEstimates: (input: Parameters<typeof canHoldEstimates>[2]) => canHoldEstimates(db, config.trust, input),
      /** Replaces a solver's capabilities; the slots they freed for waiting tasks are told. */
      async replaceCapabilities(
        ...args: Parameters<typeof replaceCapabilities> extends [Db, TrustPolicy, ...infer A] ? A : never
      ) {
        return engine.afterCommit(await replaceCapabilities(db, config.trust, ...args)).capabilities;
      },
    },
    trust: {
      ...bindDb(db, {
        listQuarantines,
        disagreementsOf,
        usageInflationsOf,
        setVerifier,
        verifierSince,
        canaryPageAt,
        chatAuditsOf,
      }),
      reputationOf: (solverId: string) => reputationOf(db, config.trust, solverId),
      clearQuarantine: (solverId: string, note: string | null) => clearQuarantine(db, config.trust, solverId, note),
      /** What matching and the solver itself see of a solver's trust: its quarantines, reputation and held pay. */
      async standing(solverId: string) {
        const [quarantines, reputation, held] = await Promise.all([
          quarantinesOf(db, solverId),
          reputationOf(db, config.trust, solverId),
          heldEarnings(db, solverId),
        ]);
        return { quarantines, reputation, held };
      },
      /** Confirms a quarantine; the refunded tasks' webhook deliveries are sent. */
      async confirmQuarantine(solverId: string, note: string | null) {
        const confirmed = await confirmQuarantine(db, solverId, note);
        return confirmed && engine.afterCommit(confirmed);
      },
    },
    limits: bindDb(db, { countKeyedRequest, countAddressRequest, simulateRateLimit, resetRateLimit }),
    status: {
      ...bindDb(db, { statusCounts, queueStatus }),
      /** Whether the platform account can pay the checks that take solvers off probation, and who waits for one. */
      checkFunding: () => checkFunding(db, config.trust),
      database: () => reachable(pingDatabase(db)),
      temporal: () => reachable(temporal.workflowService.getSystemInfo({})),
    },
    crawls: {
      ...bindDb(db, {
        crawlByIdempotencyKey,
        getCrawl,
        activeCrawls,
        crawlCounts,
        crawlCost,
        crawlDocuments,
        crawlErrors,
      }),
      /** Stores a crawl or batch job; the webhook deliveries it wrote are sent. */
      async create(...args: Parameters<typeof createCrawl> extends [Db, ...infer A] ? A : never) {
        return engine.afterCommit(await createCrawl(db, ...args));
      },
      /**
       * Starts the job's workflow: `started` (or already running: the same job asked for again), or
       * `not_started`, and the job is then failed.
       */
      async start(crawl: {
        crawl_id: string;
        account_id: string;
        kind: string;
        url: string | null;
      }): Promise<'started' | 'not_started'> {
        const crawlId = crawl.crawl_id;
        try {
          await temporal.workflow.start('crawlWorkflow', {
            taskQueue: config.taskQueue,
            workflowId: crawlWorkflowId(crawlId),
            args: [{ crawlId } satisfies CrawlWorkflowInput],
            staticSummary: crawlSummary(crawl),
          });
        } catch (error) {
          if (error instanceof WorkflowExecutionAlreadyStartedError) return 'started';
          engine.afterCommit(await finishCrawl(db, crawlId, 'failed', 'The job could not be started.'));
          return 'not_started';
        }
        return 'started';
      },
      /** Stops the job: pending pages at once, running ones' tasks by their cancel. The job as it is then. */
      async cancel(crawlId: string) {
        engine.afterCommit(await finishCrawl(db, crawlId, 'cancelled'));
        await cancelTasks({ engine }, await runningPageTasks(db, crawlId));
        return getCrawl(db, crawlId);
      },
    },
  };
}

export type Services = ReturnType<typeof createServices>;
