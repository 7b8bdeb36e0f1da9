import path from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { CAPABILITY_TASK_TYPES, MAX_CONCURRENT_LIMIT, type CapabilityTaskType } from '../schemas/domain';
import { LOG_FORMATS, logFormatOf } from '../logger';

/**
 * The solver program's single configuration point. `parseSolverConfig(argv, env)` is pure: the solver
 * program passes its command line and its environment (processEnvironment(), src/config.ts), the stack
 * builds the config of its in-process solver. Command-line options win over environment variables.
 */

export const SEARCH_BACKENDS = ['searxng', 'brave', 'local'] as const;

/** Pages about this service, shipped so that a fresh deployment answers searches out of the box. */
export const DEFAULT_SEARCH_INDEX_DIR = path.resolve(__dirname, '../../config/search-index');

export const DEFAULT_BRAVE_API_URL = 'https://api.search.brave.com/res/v1/web/search';

const CLI_OPTIONS = {
  url: { type: 'string' },
  'api-key': { type: 'string' },
  tasks: { type: 'string' },
  'max-concurrent': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const SOLVER_USAGE = `Usage: npm run solver -- --url http://host:port --api-key KEY [--tasks proxy_fetch,web_search,...] [--max-concurrent N]

Every option has an environment variable: SOLVER_URL, SOLVER_API_KEY, SOLVER_TASK_TYPES, SOLVER_MAX_CONCURRENT.
See docs/solver-agent.md for the full configuration table.`;

const blankToUndefined = (value: string | undefined) =>
  value === undefined || value.trim() === '' ? undefined : value.trim();

const optionalString = z.string().optional().transform(blankToUndefined);

const booleanFlag = (name: string, fallback: boolean) =>
  optionalString.transform((value, ctx) => {
    if (value === undefined) return fallback;
    const normalized = value.toLowerCase();
    if (['1', 'true', 'yes', 'on'].includes(normalized)) return true;
    if (['0', 'false', 'no', 'off'].includes(normalized)) return false;
    ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${name} must be true or false, got "${value}"` });
    return z.NEVER;
  });

const positiveInt = (name: string, fallback: number, max = Number.MAX_SAFE_INTEGER) =>
  optionalString.transform((value, ctx) => {
    if (value === undefined) return fallback;
    const parsed = Number(value);
    if (!Number.isInteger(parsed) || parsed <= 0) {
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${name} must be a positive integer, got "${value}"` });
      return z.NEVER;
    }
    if (parsed > max) {
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${name} must be at most ${max}, got "${value}"` });
      return z.NEVER;
    }
    return parsed;
  });

const httpUrl = (name: string) =>
  optionalString.transform((value, ctx) => {
    if (value === undefined) return undefined;
    let parsed: URL;
    try {
      parsed = new URL(value);
    } catch {
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${name} must be an http(s) URL, got "${value}"` });
      return z.NEVER;
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${name} must be an http(s) URL, got "${value}"` });
      return z.NEVER;
    }
    return value.replace(/\/+$/, '');
  });

const DECIMAL = /^\d+(\.\d+)?$/;

const decimalString = (name: string, fallback: string) =>
  optionalString.transform((value, ctx) => {
    if (value === undefined) return fallback;
    if (!DECIMAL.test(value)) {
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${name} must be a non-negative decimal, got "${value}"` });
      return z.NEVER;
    }
    return value;
  });

const commaList = optionalString.transform((value) =>
  value === undefined
    ? undefined
    : value
        .split(',')
        .map((item) => item.trim())
        .filter(Boolean),
);

const taskTypeList = (name: string) =>
  commaList.transform((items, ctx) => {
    if (items === undefined) return undefined;
    const unknown = items.filter((item) => !(CAPABILITY_TASK_TYPES as readonly string[]).includes(item));
    if (unknown.length > 0) {
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        message: `${name} has unknown task types ${unknown.join(', ')}; known: ${CAPABILITY_TASK_TYPES.join(', ')}`,
      });
      return z.NEVER;
    }
    return [...new Set(items)] as CapabilityTaskType[];
  });

/** "2" applies to every task type; "proxy_fetch=1,screenshot=3" sets them one by one (others keep the default). */
const pricePoints = (name: string, fallback: string) =>
  optionalString.transform((value, ctx) => {
    const prices = Object.fromEntries(CAPABILITY_TASK_TYPES.map((type) => [type, fallback])) as Record<
      CapabilityTaskType,
      string
    >;
    if (value === undefined) return prices;
    if (DECIMAL.test(value)) {
      for (const type of CAPABILITY_TASK_TYPES) prices[type] = value;
      return prices;
    }
    for (const entry of value
      .split(',')
      .map((item) => item.trim())
      .filter(Boolean)) {
      const [type, price] = entry.split('=').map((part) => part?.trim());
      if (
        !(CAPABILITY_TASK_TYPES as readonly string[]).includes(type ?? '') ||
        price === undefined ||
        !DECIMAL.test(price)
      ) {
        ctx.addIssue({
          code: z.ZodIssueCode.custom,
          message: `${name} must be a decimal or a list like "proxy_fetch=1,screenshot=3", got "${value}"`,
        });
        return z.NEVER;
      }
      prices[type as CapabilityTaskType] = price;
    }
    return prices;
  });

const SolverEnv = z.object({
  SOLVER_URL: httpUrl('SOLVER_URL (--url)'),
  SOLVER_API_KEY: optionalString,
  SOLVER_TASK_TYPES: taskTypeList('SOLVER_TASK_TYPES (--tasks)'),
  SOLVER_MAX_CONCURRENT: positiveInt('SOLVER_MAX_CONCURRENT (--max-concurrent)', 4, MAX_CONCURRENT_LIMIT),
  // Chat only forwards to an upstream and waits on it: many at once cost little here.
  SOLVER_CHAT_MAX_CONCURRENT: positiveInt('SOLVER_CHAT_MAX_CONCURRENT', 32, MAX_CONCURRENT_LIMIT),
  SOLVER_PROVIDER_NAME: optionalString,
  // The country this solver fetches from, declared on its web capabilities (tasks asking for it go here).
  SOLVER_COUNTRY: optionalString.pipe(
    z
      .string()
      .regex(/^[A-Za-z]{2}$/, 'SOLVER_COUNTRY must be an ISO 3166-1 alpha-2 country code, e.g. DE')
      .transform((value) => value.toUpperCase())
      .optional(),
  ),
  SOLVER_PRICE_POINTS: pricePoints('SOLVER_PRICE_POINTS', '1'),
  SOLVER_SHUTDOWN_GRACE_MS: positiveInt('SOLVER_SHUTDOWN_GRACE_MS', 10_000),
  SOLVER_RECONNECT_BASE_MS: positiveInt('SOLVER_RECONNECT_BASE_MS', 500),
  SOLVER_RECONNECT_MAX_MS: positiveInt('SOLVER_RECONNECT_MAX_MS', 30_000),
  ALLOW_PRIVATE_NETWORKS: booleanFlag('ALLOW_PRIVATE_NETWORKS', false),
  SEARCH_BACKEND: optionalString.pipe(
    z
      .enum(SEARCH_BACKENDS, {
        errorMap: () => ({ message: `SEARCH_BACKEND must be one of ${SEARCH_BACKENDS.join(', ')}` }),
      })
      .optional(),
  ),
  SEARXNG_URL: httpUrl('SEARXNG_URL'),
  BRAVE_API_KEY: optionalString,
  BRAVE_API_URL: httpUrl('BRAVE_API_URL'),
  SEARCH_INDEX_DIR: optionalString,
  CHAT_UPSTREAM_URL: httpUrl('CHAT_UPSTREAM_URL'),
  CHAT_UPSTREAM_API_KEY: optionalString,
  CHAT_MODELS: commaList,
  CHAT_POINTS_PER_1K_TOKENS: decimalString('CHAT_POINTS_PER_1K_TOKENS', '1'),
  CHAT_PROMPT_POINTS_PER_1K_TOKENS: decimalString('CHAT_PROMPT_POINTS_PER_1K_TOKENS', ''),
  CHAT_COMPLETION_POINTS_PER_1K_TOKENS: decimalString('CHAT_COMPLETION_POINTS_PER_1K_TOKENS', ''),
  CHAT_TIER: optionalString.pipe(
    z
      .enum(['strong', 'standard', 'basic'], {
        errorMap: () => ({ message: 'CHAT_TIER must be strong, standard or basic' }),
      })
      .optional(),
  ),
  CHROMIUM_PATH: optionalString,
  BROWSER_PAGES: positiveInt('BROWSER_PAGES', 2),
  BROWSER_TIMEOUT_MS: positiveInt('BROWSER_TIMEOUT_MS', 30_000),
  FETCH_MAX_BYTES: positiveInt('FETCH_MAX_BYTES', 5 * 1024 * 1024),
  FETCH_TIMEOUT_MS: positiveInt('FETCH_TIMEOUT_MS', 30_000),
  SNAPSHOT_MAX_BYTES: positiveInt('SNAPSHOT_MAX_BYTES', 200 * 1024),
  LOG_LEVEL: optionalString,
  LOG_FORMAT: optionalString.pipe(
    z.enum(LOG_FORMATS, { errorMap: () => ({ message: 'LOG_FORMAT must be json or pretty' }) }).optional(),
  ),
});

/** The resolved configuration; tests and the HTTP stack may build or adjust one directly. */
export const SolverConfigSchema = z.object({
  url: z.string().url(),
  apiKey: z.string().min(1),
  taskTypes: z.array(z.enum(CAPABILITY_TASK_TYPES)).nullable(),
  maxConcurrent: z.number().int().positive(),
  chatMaxConcurrent: z.number().int().positive(),
  providerName: z.string().min(1),
  country: z
    .string()
    .regex(/^[A-Z]{2}$/)
    .nullable()
    .default(null),
  pricePoints: z.record(z.enum(CAPABILITY_TASK_TYPES), z.string()),
  shutdownGraceMs: z.number().int().positive(),
  reconnectBaseMs: z.number().int().positive(),
  reconnectMaxMs: z.number().int().positive(),
  allowPrivateNetworks: z.boolean(),
  search: z.discriminatedUnion('backend', [
    z.object({ backend: z.literal('local'), indexDir: z.string() }),
    z.object({ backend: z.literal('searxng'), searxngUrl: z.string() }),
    z.object({ backend: z.literal('brave'), apiKey: z.string(), apiUrl: z.string() }),
    z.object({ backend: z.literal('none') }),
  ]),
  chat: z
    .object({
      upstreamUrl: z.string(),
      apiKey: z.string().optional(),
      models: z.array(z.string().min(1)).min(1),
      pointsPer1kTokens: z.string(),
      /** The prompt and completion rates apart (unset: pointsPer1kTokens). */
      promptPointsPer1kTokens: z.string().optional(),
      completionPointsPer1kTokens: z.string().optional(),
      tier: z.enum(['strong', 'standard', 'basic']),
    })
    .nullable(),
  chromiumPath: z.string().min(1),
  browserPages: z.number().int().positive(),
  browserTimeoutMs: z.number().int().positive(),
  fetchMaxBytes: z.number().int().positive(),
  fetchTimeoutMs: z.number().int().positive(),
  snapshotMaxBytes: z.number().int().positive(),
  logLevel: z.string(),
  logFormat: z.enum(LOG_FORMATS),
});

export type SolverConfig = z.infer<typeof SolverConfigSchema>;
export type SearchConfig = SolverConfig['search'];
export type ChatConfig = NonNullable<SolverConfig['chat']>;

export class SolverConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid solver configuration:\n${problems.map((line) => `  ${line}`).join('\n')}`);
    this.name = 'SolverConfigError';
  }
}

export type Environment = Record<string, string | undefined>;

/** Returns null when `--help` was asked for. */
export function parseSolverConfig(argv: readonly string[], env: Environment): SolverConfig | null {
  const cli = parseCli(argv);
  if (cli.help) return null;
  const merged: Environment = {
    ...env,
    ...(cli.url !== undefined && { SOLVER_URL: cli.url }),
    ...(cli['api-key'] !== undefined && { SOLVER_API_KEY: cli['api-key'] }),
    ...(cli.tasks !== undefined && { SOLVER_TASK_TYPES: cli.tasks }),
    ...(cli['max-concurrent'] !== undefined && { SOLVER_MAX_CONCURRENT: cli['max-concurrent'] }),
  };
  const parsed = SolverEnv.safeParse(merged);
  if (!parsed.success) {
    throw new SolverConfigError(
      parsed.error.issues.map((issue) => {
        const name = issue.path.join('.') || 'env';
        return issue.message.startsWith(name) ? issue.message : `${name}: ${issue.message}`;
      }),
    );
  }
  const e = parsed.data;
  const problems: string[] = [];
  if (e.SOLVER_URL === undefined)
    problems.push('SOLVER_URL (--url) is required: the marketplace base URL, e.g. http://127.0.0.1:3000');
  if (e.SOLVER_API_KEY === undefined)
    problems.push("SOLVER_API_KEY (--api-key) is required: the solver account's api_key");

  const search = resolveSearch(e, problems);
  const chat = resolveChat(e, problems);
  if (e.SOLVER_TASK_TYPES?.includes('web_search') && search.backend === 'none') {
    problems.push(
      'SOLVER_TASK_TYPES includes web_search but no search backend is configured (set ' +
        'SEARCH_INDEX_DIR, SEARXNG_URL or BRAVE_API_KEY)',
    );
  }
  if (e.SOLVER_TASK_TYPES?.includes('chat_completion') && chat === null) {
    problems.push('SOLVER_TASK_TYPES includes chat_completion but CHAT_UPSTREAM_URL is not set');
  }
  if (e.SOLVER_RECONNECT_MAX_MS < e.SOLVER_RECONNECT_BASE_MS) {
    problems.push('SOLVER_RECONNECT_MAX_MS must not be smaller than SOLVER_RECONNECT_BASE_MS');
  }
  if (problems.length > 0) throw new SolverConfigError(problems);

  return SolverConfigSchema.parse({
    url: e.SOLVER_URL,
    apiKey: e.SOLVER_API_KEY,
    taskTypes: e.SOLVER_TASK_TYPES ?? null,
    maxConcurrent: e.SOLVER_MAX_CONCURRENT,
    chatMaxConcurrent: e.SOLVER_CHAT_MAX_CONCURRENT,
    providerName: e.SOLVER_PROVIDER_NAME ?? 'reference-solver',
    country: e.SOLVER_COUNTRY ?? null,
    pricePoints: e.SOLVER_PRICE_POINTS,
    shutdownGraceMs: e.SOLVER_SHUTDOWN_GRACE_MS,
    reconnectBaseMs: e.SOLVER_RECONNECT_BASE_MS,
    reconnectMaxMs: e.SOLVER_RECONNECT_MAX_MS,
    allowPrivateNetworks: e.ALLOW_PRIVATE_NETWORKS,
    search,
    chat,
    chromiumPath: e.CHROMIUM_PATH ?? '/usr/bin/chromium',
    browserPages: e.BROWSER_PAGES,
    browserTimeoutMs: e.BROWSER_TIMEOUT_MS,
    fetchMaxBytes: e.FETCH_MAX_BYTES,
    fetchTimeoutMs: e.FETCH_TIMEOUT_MS,
    snapshotMaxBytes: e.SNAPSHOT_MAX_BYTES,
    logLevel: e.LOG_LEVEL ?? 'info',
    logFormat: logFormatOf(e.LOG_FORMAT),
  });
}

function parseCli(argv: readonly string[]) {
  try {
    return parseArgs({ args: [...argv], options: CLI_OPTIONS, strict: true, allowPositionals: false }).values;
  } catch (error) {
    throw new SolverConfigError([`command line: ${(error as Error).message}`]);
  }
}

type ParsedEnv = z.infer<typeof SolverEnv>;

function resolveSearch(e: ParsedEnv, problems: string[]): SearchConfig {
  const backend =
    e.SEARCH_BACKEND ??
    (e.SEARCH_INDEX_DIR ? 'local' : e.SEARXNG_URL ? 'searxng' : e.BRAVE_API_KEY ? 'brave' : undefined);
  switch (backend) {
    case 'local':
      if (!e.SEARCH_INDEX_DIR)
        problems.push('SEARCH_BACKEND=local needs SEARCH_INDEX_DIR (a folder of .html, .md or .txt pages)');
      return { backend, indexDir: path.resolve(e.SEARCH_INDEX_DIR ?? '.') };
    case 'searxng':
      if (!e.SEARXNG_URL) problems.push('SEARCH_BACKEND=searxng needs SEARXNG_URL');
      return { backend, searxngUrl: e.SEARXNG_URL ?? '' };
    case 'brave':
      if (!e.BRAVE_API_KEY) problems.push('SEARCH_BACKEND=brave needs BRAVE_API_KEY');
      return { backend, apiKey: e.BRAVE_API_KEY ?? '', apiUrl: e.BRAVE_API_URL ?? DEFAULT_BRAVE_API_URL };
    default:
      return { backend: 'none' };
  }
}

function resolveChat(e: ParsedEnv, problems: string[]): ChatConfig | null {
  if (e.CHAT_UPSTREAM_URL === undefined) {
    if (e.CHAT_MODELS !== undefined) problems.push('CHAT_MODELS is set but CHAT_UPSTREAM_URL is not');
    return null;
  }
  if (!e.CHAT_MODELS || e.CHAT_MODELS.length === 0) {
    problems.push(
      'CHAT_UPSTREAM_URL is set but CHAT_MODELS is empty: list the upstream model names to ' +
        'advertise, comma-separated',
    );
    return null;
  }
  return {
    upstreamUrl: e.CHAT_UPSTREAM_URL,
    apiKey: e.CHAT_UPSTREAM_API_KEY,
    models: e.CHAT_MODELS,
    pointsPer1kTokens: e.CHAT_POINTS_PER_1K_TOKENS,
    ...(e.CHAT_PROMPT_POINTS_PER_1K_TOKENS ? { promptPointsPer1kTokens: e.CHAT_PROMPT_POINTS_PER_1K_TOKENS } : {}),
    ...(e.CHAT_COMPLETION_POINTS_PER_1K_TOKENS
      ? { completionPointsPer1kTokens: e.CHAT_COMPLETION_POINTS_PER_1K_TOKENS }
      : {}),
    tier: e.CHAT_TIER ?? 'strong',
  };
}
