import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { readStrongModels, type Config } from '../config';
import { deposit, getBalance, PLATFORM_ACCOUNT_ID } from '../db/ledger';
import type { Db } from '../db/pool';
import { reputationOf } from '../db/quarantines';
import type { TrustPolicy } from '../db/reputation';
import { setVerifier } from '../db/verifiers';
import type { Logger } from '../logger';
import type { CapabilityTaskType } from '../schemas/domain';
import { startSolverAgent } from '../solver/agent';
import { DEFAULT_SEARCH_INDEX_DIR, parseSolverConfig, type Environment, type SolverConfig } from '../solver/config';

/**
 * The reference solver that `npm start` runs in-process, so that a fresh local stack answers web tasks
 * out of the box. It is an ordinary solver: its own account (created through the API once and kept in
 * DATA_DIR), capabilities, WebSocket and earnings.
 */

export interface LocalSolver {
  solverId: string;
  taskTypes: CapabilityTaskType[];
  /** Where it looks for Chromium; without it, screenshot and page_snapshot are not served. */
  chromiumPath: string;
  stop(): Promise<void>;
}

const SolverAccount = z.object({ account_id: z.string().min(1), api_key: z.string().min(1) });
export type SolverAccount = z.infer<typeof SolverAccount>;

// Registration and the WebSocket are on this machine; a solver not welcomed by then will not be.
const CONNECT_WAIT_MS = 30_000;

export const localSolverFile = (config: Config) => path.join(config.dataDir, 'local-solver.json');

/**
 * Chat is routed to strong-tier solvers only, and the API refuses a strong claim for a model off the
 * allowlist (which would refuse the whole capability list, web tasks included): offer only allowlisted models.
 */
export function splitChatModels(config: Config): { offered: string[]; unlisted: string[] } {
  const allowlist = readStrongModels(config);
  const models = config.localSolverBackends.chatModels;
  return {
    offered: models.filter((model) => allowlist.includes(model)),
    unlisted: models.filter((model) => !allowlist.includes(model)),
  };
}

/** The bundled solver's configuration, built by the solver's own parser from the service configuration. */
export function localSolverConfig(config: Config, apiUrl: string, apiKey: string): SolverConfig {
  const backends = config.localSolverBackends;
  const chatModels = splitChatModels(config).offered;
  // Without a search service configured, the shipped pages keep web_search working offline.
  const searchIndexDir =
    backends.searchIndexDir ?? (backends.searxngUrl || backends.braveApiKey ? undefined : DEFAULT_SEARCH_INDEX_DIR);
  const env: Environment = {
    SOLVER_URL: apiUrl,
    SOLVER_API_KEY: apiKey,
    ALLOW_PRIVATE_NETWORKS: String(config.allowPrivateNetworks),
    SEARCH_INDEX_DIR: searchIndexDir,
    SEARXNG_URL: backends.searxngUrl,
    BRAVE_API_KEY: backends.braveApiKey,
    CHROMIUM_PATH: backends.chromiumPath,
    SOLVER_MAX_CONCURRENT: backends.maxConcurrent,
    SOLVER_CHAT_MAX_CONCURRENT: backends.chatMaxConcurrent,
    BROWSER_PAGES: backends.browserPages,
    LOG_LEVEL: config.logLevel,
    // When every configured model is off the allowlist (startLocalSolver warns), chat is left out; any
    // other combination goes to the solver's parser, which names what is missing.
    ...(!(backends.chatModels.length > 0 && chatModels.length === 0) && {
      CHAT_UPSTREAM_URL: backends.chatUpstreamUrl,
      CHAT_UPSTREAM_API_KEY: backends.chatUpstreamApiKey,
      CHAT_MODELS: chatModels.join(','),
    }),
  };
  return parseSolverConfig([], env)!;
}

/** The solver account kept in DATA_DIR; registered anew when the file is missing or its key is unknown to the API. */
export async function ensureLocalSolverAccount(config: Config, apiUrl: string, logger: Logger): Promise<SolverAccount> {
  const file = localSolverFile(config);
  const saved = readAccount(file);
  if (saved && (await keyIsKnown(apiUrl, saved.api_key))) return saved;
  if (saved)
    logger.warn(
      { file, account_id: saved.account_id },
      'the saved local solver key is unknown to this database; registering a new solver account',
    );
  const response = await fetch(`${apiUrl}/v1/register`, { method: 'POST' });
  const text = await response.text();
  if (!response.ok)
    throw new Error(`could not register the local solver's account: HTTP ${response.status} ${text.slice(0, 300)}`);
  const account = SolverAccount.parse(JSON.parse(text));
  writeAccount(file, account);
  logger.info({ account_id: account.account_id, file }, 'local solver account created');
  return account;
}

export async function startLocalSolver(options: {
  config: Config;
  apiUrl: string;
  logger: Logger;
}): Promise<LocalSolver> {
  try {
    return await startAgent(options);
  } catch (error) {
    // No `cause`: the logger would repeat its message after ours.
    throw new Error(
      `The bundled solver did not start (LOCAL_SOLVER=off runs the stack without it): ${(error as Error).message}`,
    );
  }
}

async function startAgent(options: { config: Config; apiUrl: string; logger: Logger }): Promise<LocalSolver> {
  const logger = options.logger.child({ component: 'local-solver' });
  const { unlisted } = splitChatModels(options.config);
  if (unlisted.length > 0) {
    logger.warn(
      { models: unlisted },
      'CHAT_MODELS not on the strong-tier allowlist (STRONG_MODELS or config/strong-models.txt) ' + 'are not offered',
    );
  }
  const account = await ensureLocalSolverAccount(options.config, options.apiUrl, logger);
  const solverConfig = localSolverConfig(options.config, options.apiUrl, account.api_key);
  const agent = await startSolverAgent(solverConfig, { logger });
  let timer: NodeJS.Timeout | undefined;
  try {
    const welcome = await Promise.race([
      agent.connected,
      new Promise<never>((_resolve, reject) => {
        timer = setTimeout(
          () =>
            reject(
              new Error(`the local solver was not welcomed by ${options.apiUrl} within ${CONNECT_WAIT_MS / 1000} s`),
            ),
          CONNECT_WAIT_MS,
        );
      }),
    ]);
    return {
      solverId: welcome.solver_id,
      taskTypes: agent.taskTypes,
      chromiumPath: solverConfig.chromiumPath,
      stop: () => agent.stop(),
    };
  } catch (error) {
    await agent.stop({ graceMs: 0 });
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

function readAccount(file: string): SolverAccount | undefined {
  try {
    return SolverAccount.parse(JSON.parse(fs.readFileSync(file, 'utf8')));
  } catch {
    return undefined;
  }
}

/** The file holds a credential: written whole (rename) and readable by its owner only. */
function writeAccount(file: string, account: SolverAccount): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const temporary = `${file}.${process.pid}.tmp`;
  fs.rmSync(temporary, { force: true });
  fs.writeFileSync(temporary, `${JSON.stringify(account, null, 2)}\n`, { mode: 0o600 });
  fs.renameSync(temporary, file);
}

/** Only a 401 proves the key unknown; any other answer leaves it to the agent's own retries. */
async function keyIsKnown(apiUrl: string, apiKey: string): Promise<boolean> {
  const response = await fetch(`${apiUrl}/v1/balance`, { headers: { authorization: `Bearer ${apiKey}` } });
  await response.body?.cancel();
  return response.status !== 401;
}

/**
 * What the local stack keeps on the platform account: the bundled solver's probation canaries and chat
 * audits, and the runs that verify client tasks, are paid from it (docs/trust.md, "Canaries"), and a
 * fresh stack's platform account has nothing.
 */
export const LOCAL_PLATFORM_POINTS = 1000;
// Its probation canaries are local pages (a browser's first start included) and, with chat, one audit.
const PROBATION_WAIT_MS = 60_000;

/** Tops the platform account up to LOCAL_PLATFORM_POINTS with a deposit (points on one's own machine). */
export async function fundLocalPlatform(db: Db, logger: Logger): Promise<void> {
  const available = Number((await getBalance(db, PLATFORM_ACCOUNT_ID))?.available_points ?? 0);
  if (available >= LOCAL_PLATFORM_POINTS) return;
  const amount = String(LOCAL_PLATFORM_POINTS - available);
  await deposit(db, {
    accountId: PLATFORM_ACCOUNT_ID,
    amount,
    idempotencyKey: `local-stack-platform:${crypto.randomUUID()}`,
  });
  logger.info({ amount }, 'platform account funded for canaries and verification runs');
}

/**
 * Marks the bundled solver a verifier (docs/trust.md, "Verified client tasks"): on one's own machine it
 * is the operator's, so sampled client tasks of other solvers are re-run by it.
 */
export async function markLocalVerifier(db: Db, solverId: string, logger: Logger): Promise<void> {
  await setVerifier(db, solverId, true);
  logger.info({ solver_id: solverId }, 'the bundled solver verifies sampled client tasks');
}

/**
 * Waits until the bundled solver may take client work of every type it offers (its probation canaries
 * passed), so that the stack is ready when it says so; after PROBATION_WAIT_MS it names what is still
 * on probation and goes on.
 */
export async function awaitLocalProbation(
  db: Db,
  policy: TrustPolicy,
  solverId: string,
  logger: Logger,
): Promise<void> {
  const deadline = Date.now() + PROBATION_WAIT_MS;
  for (;;) {
    const waiting = (await reputationOf(db, policy, solverId))
      .filter((row) => !row.client_work)
      .map((row) => row.task_type);
    if (waiting.length === 0) return;
    if (Date.now() > deadline) {
      logger.warn(
        { task_types: waiting, solver_id: solverId },
        'the bundled solver has not passed its probation canaries of these types yet: it gets no ' +
          'client task of them until it does (GET /v1/admin/solvers/{id}/trust)',
      );
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
