import path from 'node:path';
import fs from 'node:fs';
import net from 'node:net';
import dotenv from 'dotenv';
import { z } from 'zod';
import { LOG_FORMATS, logFormatOf } from './logger';

/**
 * All configuration is read and validated here, once. Nothing else reads process.env.
 * A `.env` file in the working directory is loaded first; real environment variables win.
 */

/**
 * One entry of CANARY_HOSTS: `[http(s)://]host[:port]`, the host a name or `*.` and a domain; where canary
 * pages are served (docs/trust.md, "Canary pages"; src/trust/canary-hosts.ts).
 */
export interface CanaryOrigin {
  scheme: 'http' | 'https';
  /** A host name, or `*.domain`: a fresh or reused label under the domain for each page. */
  host: string;
  /** Null: the scheme's own port. */
  port: number | null;
}

const ENTRY =
  /^(?:(https?):\/\/)?((?:\*\.)?(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?::(\d{1,5}))?\/?$/i;

/** Parses CANARY_HOSTS (comma-separated); a string names the entry it cannot read. */
export function parseCanaryHosts(value: string): CanaryOrigin[] | string {
  const origins: CanaryOrigin[] = [];
  for (const raw of value
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean)) {
    const match = ENTRY.exec(raw);
    const port = match?.[3] === undefined ? null : Number(match[3]);
    if (
      !match ||
      (port !== null && (port < 1 || port > 65535)) ||
      match[2]!.split('.').filter((label) => label !== '*').length < 2
    ) {
      return `"${raw}" is not [http(s)://]host[:port] with a host of at least two labels, or *.domain`;
    }
    origins.push({
      scheme: (match[1]?.toLowerCase() ?? 'https') as 'http' | 'https',
      host: match[2]!.toLowerCase(),
      port,
    });
  }
  return origins;
}

const booleanFlag = (name: string, fallback: boolean) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      if (value === undefined || value === '') return fallback;
      const normalized = value.trim().toLowerCase();
      if (['1', 'true', 'yes', 'on'].includes(normalized)) return true;
      if (['0', 'false', 'no', 'off'].includes(normalized)) return false;
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${name} must be true or false, got "${value}"` });
      return z.NEVER;
    });

const positiveInt = (name: string, fallback: number) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      if (value === undefined || value === '') return fallback;
      const parsed = Number(value);
      if (!Number.isInteger(parsed) || parsed <= 0) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${name} must be a positive integer, got "${value}"` });
        return z.NEVER;
      }
      return parsed;
    });

const nonNegativeInt = (name: string, fallback: number) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      if (value === undefined || value === '') return fallback;
      const parsed = Number(value);
      if (!Number.isInteger(parsed) || parsed < 0) {
        ctx.addIssue({
          code: z.ZodIssueCode.custom,
          message: `${name} must be a non-negative integer, got "${value}"`,
        });
        return z.NEVER;
      }
      return parsed;
    });

const fraction = (name: string, fallback: number) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      if (value === undefined || value === '') return fallback;
      const parsed = Number(value);
      if (!/^\d*\.?\d+$/.test(value.trim()) || parsed > 1) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${name} must be a number from 0 to 1, got "${value}"` });
        return z.NEVER;
      }
      return parsed;
    });

const decimalString = (name: string, fallback: string) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      if (value === undefined || value === '') return fallback;
      if (!/^\d+(\.\d+)?$/.test(value.trim())) {
        ctx.addIssue({
          code: z.ZodIssueCode.custom,
          message: `${name} must be a non-negative decimal, got "${value}"`,
        });
        return z.NEVER;
      }
      return value.trim();
    });

/** Named address ranges TRUST_PROXY accepts (the names Express's `trust proxy` knows). */
export const TRUST_PROXY_PRESETS: Record<string, readonly string[]> = {
  loopback: ['127.0.0.0/8', '::1/128'],
  linklocal: ['169.254.0.0/16', 'fe80::/10'],
  uniquelocal: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7'],
};

/** TRUST_PROXY: comma-separated addresses, CIDR ranges or preset names, as a list of CIDR ranges. */
const trustedProxyList = z
  .string()
  .optional()
  .transform((value, ctx) => {
    const ranges: string[] = [];
    for (const entry of (value ?? '')
      .split(',')
      .map((part) => part.trim())
      .filter(Boolean)) {
      const preset = TRUST_PROXY_PRESETS[entry.toLowerCase()];
      if (preset) {
        ranges.push(...preset);
        continue;
      }
      const [address, prefix, ...rest] = entry.split('/');
      const family = net.isIP(address ?? '');
      const bits = prefix === undefined ? (family === 6 ? 128 : 32) : Number(prefix);
      if (
        family === 0 ||
        rest.length > 0 ||
        (prefix !== undefined && !/^\d+$/.test(prefix)) ||
        !Number.isInteger(bits) ||
        bits < 0 ||
        bits > (family === 6 ? 128 : 32)
      ) {
        ctx.addIssue({
          code: z.ZodIssueCode.custom,
          message: `TRUST_PROXY must list addresses, CIDR ranges or ${Object.keys(TRUST_PROXY_PRESETS).join(', ')}, separated by commas; "${entry}" is none of these`,
        });
        return z.NEVER;
      }
      ranges.push(`${address}/${bits}`);
    }
    return ranges;
  });

const optionalString = z
  .string()
  .optional()
  .transform((value) => (value === undefined || value.trim() === '' ? undefined : value.trim()));

const optionalPort = (name: string) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      if (value === undefined || value.trim() === '') return undefined;
      const parsed = Number(value);
      if (!Number.isInteger(parsed) || parsed < 0 || parsed > 65535) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `${name} must be a port number, got "${value}"` });
        return z.NEVER;
      }
      return parsed;
    });

const EnvSchema = z.object({
  PORT: z
    .string()
    .optional()
    .transform((value, ctx) => {
      if (value === undefined || value === '') return 3000;
      const parsed = Number(value);
      if (!Number.isInteger(parsed) || parsed < 0 || parsed > 65535) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `PORT must be a port number, got "${value}"` });
        return z.NEVER;
      }
      return parsed;
    }),
  HOST: optionalString,
  DATA_DIR: optionalString,
  DATABASE_URL: optionalString,
  TEMPORAL_ADDRESS: optionalString,
  TEMPORAL_NAMESPACE: optionalString,
  TEMPORAL_UI_URL: optionalString,
  TEMPORAL_UI_PORT: optionalPort('TEMPORAL_UI_PORT'),
  TEMPORAL_TASK_QUEUE: optionalString,
  TEMPORAL_CLI: optionalString,
  ADMIN_API_KEY: optionalString,
  METRICS_TOKEN: optionalString,
  WORKER_METRICS_PORT: optionalPort('WORKER_METRICS_PORT'),
  STRONG_MODELS: optionalString,
  STRONG_MODELS_FILE: optionalString,
  DOMAIN_POLICY_FILE: optionalString,
  ALLOW_PRIVATE_NETWORKS: booleanFlag('ALLOW_PRIVATE_NETWORKS', false),
  API_RUNS_WORKFLOWS: booleanFlag('API_RUNS_WORKFLOWS', false),
  LOCAL_SOLVER: optionalString,
  // Backends of the bundled solver; src/solver/config.ts validates them with the rest of its configuration.
  CHAT_UPSTREAM_URL: optionalString,
  CHAT_UPSTREAM_API_KEY: optionalString,
  CHAT_MODELS: optionalString,
  SEARCH_INDEX_DIR: optionalString,
  SEARXNG_URL: optionalString,
  BRAVE_API_KEY: optionalString,
  CHROMIUM_PATH: optionalString,
  SOLVER_MAX_CONCURRENT: optionalString,
  SOLVER_CHAT_MAX_CONCURRENT: optionalString,
  BROWSER_PAGES: optionalString,
  LOG_LEVEL: optionalString,
  LOG_FORMAT: optionalString.pipe(
    z.enum(LOG_FORMATS, { errorMap: () => ({ message: 'LOG_FORMAT must be json or pretty' }) }).optional(),
  ),
  BODY_LIMIT_BYTES: positiveInt('BODY_LIMIT_BYTES', 1024 * 1024),
  PLATFORM_FEE_PERCENT: decimalString('PLATFORM_FEE_PERCENT', '10'),
  DEFAULT_WEB_TASK_PRICE_POINTS: decimalString('DEFAULT_WEB_TASK_PRICE_POINTS', '10'),
  DEFAULT_CHAT_PRICE_POINTS: decimalString('DEFAULT_CHAT_PRICE_POINTS', '100'),
  DEFAULT_TASK_TIMEOUT_SECONDS: positiveInt('DEFAULT_TASK_TIMEOUT_SECONDS', 60),
  CHAT_TIMEOUT_SECONDS: positiveInt('CHAT_TIMEOUT_SECONDS', 300),
  SSE_KEEPALIVE_MS: positiveInt('SSE_KEEPALIVE_MS', 15000),
  MAX_TASK_ATTEMPTS: positiveInt('MAX_TASK_ATTEMPTS', 3),
  ATTEMPT_TIMEOUT_SECONDS: positiveInt('ATTEMPT_TIMEOUT_SECONDS', 30),
  ACCEPT_TIMEOUT_MS: positiveInt('ACCEPT_TIMEOUT_MS', 5000),
  HEARTBEAT_INTERVAL_MS: positiveInt('HEARTBEAT_INTERVAL_MS', 15000),
  RATE_LIMIT_PER_MINUTE: positiveInt('RATE_LIMIT_PER_MINUTE', 600),
  REGISTER_LIMIT_PER_HOUR: positiveInt('REGISTER_LIMIT_PER_HOUR', 20),
  UNAUTHENTICATED_LIMIT_PER_MINUTE: positiveInt('UNAUTHENTICATED_LIMIT_PER_MINUTE', 60),
  SOLVER_CONNECT_LIMIT_PER_MINUTE: positiveInt('SOLVER_CONNECT_LIMIT_PER_MINUTE', 120),
  TRUST_PROXY: trustedProxyList,
  QUEUE_LIMIT_PER_TASK_TYPE: positiveInt('QUEUE_LIMIT_PER_TASK_TYPE', 10000),
  SHUTDOWN_GRACE_MS: positiveInt('SHUTDOWN_GRACE_MS', 10000),
  WEBHOOK_RETRY_FOR_SECONDS: positiveInt('WEBHOOK_RETRY_FOR_SECONDS', 86400),
  WEBHOOK_TIMEOUT_MS: positiveInt('WEBHOOK_TIMEOUT_MS', 10000),
  TRUST_MIN_SCORE: fraction('TRUST_MIN_SCORE', 0.3),
  TRUST_PROBATION_CANARIES: nonNegativeInt('TRUST_PROBATION_CANARIES', 1),
  TRUST_HALF_LIFE_HOURS: positiveInt('TRUST_HALF_LIFE_HOURS', 24),
  CANARY_EVERY_TASKS: nonNegativeInt('CANARY_EVERY_TASKS', 50),
  CHECK_PRICE_CEILING_POINTS: decimalString('CHECK_PRICE_CEILING_POINTS', '100'),
  REDUNDANT_RUN_FRACTION: fraction('REDUNDANT_RUN_FRACTION', 0.02),
  VERIFICATION_START_FRACTION: fraction('VERIFICATION_START_FRACTION', 0.5),
  CANARY_SWEEP_SECONDS: positiveInt('CANARY_SWEEP_SECONDS', 300),
  EARNINGS_VESTING_SECONDS: nonNegativeInt('EARNINGS_VESTING_SECONDS', 86400),
  EARNINGS_VESTING_CHECKS: nonNegativeInt('EARNINGS_VESTING_CHECKS', 3),
  CANARY_SEARCH_ORACLE: z
    .string()
    .optional()
    .transform((value, ctx) => {
      const trimmed = value?.trim() ?? '';
      if (trimmed === '' || trimmed.toLowerCase() === 'off') return undefined;
      if (trimmed.toLowerCase() === 'bundled') return { kind: 'bundled' as const };
      if (/^https?:\/\/[^/]/i.test(trimmed)) return { kind: 'searxng' as const, url: trimmed.replace(/\/+$/, '') };
      ctx.addIssue({
        code: z.ZodIssueCode.custom,
        message: `CANARY_SEARCH_ORACLE must be "bundled", a SearXNG instance's http(s) URL, or unset, got "${value}"`,
      });
      return z.NEVER;
    }),
  REDUNDANT_RUN_SWEEP_SECONDS: positiveInt('REDUNDANT_RUN_SWEEP_SECONDS', 300),
  CANARY_HOSTS: z
    .string()
    .optional()
    .transform((value, ctx) => {
      const parsed = parseCanaryHosts(value ?? '');
      if (typeof parsed === 'string') {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `CANARY_HOSTS: ${parsed}` });
        return z.NEVER;
      }
      return parsed;
    }),
  PUBLIC_BASE_URL: z
    .string()
    .optional()
    .refine((value) => value === undefined || value.trim() === '', {
      message:
        'PUBLIC_BASE_URL is no longer read: canary pages are served under CANARY_HOSTS ' +
        '(docs/trust.md, "Canary pages")',
    }),
  RESULT_RETENTION_SECONDS: positiveInt('RESULT_RETENTION_SECONDS', 30 * 86400),
  // Firecrawl's default maxAge: two days.
  PAGE_CACHE_DEFAULT_MAX_AGE_SECONDS: nonNegativeInt('PAGE_CACHE_DEFAULT_MAX_AGE_SECONDS', 2 * 86400),
  ARTIFACT_S3_BUCKET: optionalString,
  ARTIFACT_S3_ENDPOINT: optionalString,
  ARTIFACT_S3_REGION: optionalString,
  ARTIFACT_S3_ACCESS_KEY_ID: optionalString,
  ARTIFACT_S3_SECRET_ACCESS_KEY: optionalString,
  NODE_ID: optionalString,
  WORKFLOW_BUNDLE_PATH: optionalString,
});

export type Config = ReturnType<typeof loadConfig>;

/** `temporal server start-dev`'s own UI port, where its users look first. */
export const DEFAULT_TEMPORAL_UI_PORT = 8233;

// Tasks failed on their target that use up an account's whole per-minute rate limit: a client that
// keeps sending bad targets is limited, not the solvers (docs/trust.md, "Target failures").
const TARGET_FAILED_TASKS_PER_MINUTE = 10;

/**
 * The environment this process was started with, for what takes its own settings from it: the solver
 * program (parseSolverConfig, src/solver/config.ts) and the programs of the embedded PostgreSQL.
 */
export const processEnvironment = (): NodeJS.ProcessEnv => process.env;

export function loadConfig(env: NodeJS.ProcessEnv = processEnvironment()) {
  dotenv.config({ quiet: true } as dotenv.DotenvConfigOptions);
  const parsed = EnvSchema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `  ${issue.path.join('.') || 'env'}: ${issue.message}`);
    throw new Error(`Invalid configuration:\n${lines.join('\n')}`);
  }
  const e = parsed.data;
  const root = path.resolve(__dirname, '..');
  const dataDir = path.resolve(e.DATA_DIR ?? path.join(root, '.data'));
  const localSolver = (e.LOCAL_SOLVER ?? 'on').toLowerCase();
  if (!['on', 'off', 'true', 'false', '1', '0'].includes(localSolver)) {
    throw new Error(`Invalid configuration:\n  LOCAL_SOLVER: must be "on" or "off", got "${e.LOCAL_SOLVER}"`);
  }
  // Canary pages go where the operator says; without that, on a machine whose solvers may fetch
  // loopback, under names of localhost; otherwise nowhere (no page canaries are sent).
  if (!e.ARTIFACT_S3_BUCKET && (e.ARTIFACT_S3_ENDPOINT || e.ARTIFACT_S3_ACCESS_KEY_ID)) {
    throw new Error(
      'Invalid configuration:\n  ARTIFACT_S3_BUCKET: must be set with ARTIFACT_S3_ENDPOINT or ' +
        'ARTIFACT_S3_ACCESS_KEY_ID (the bucket artifacts go to)',
    );
  }
  if (Boolean(e.ARTIFACT_S3_ACCESS_KEY_ID) !== Boolean(e.ARTIFACT_S3_SECRET_ACCESS_KEY)) {
    throw new Error(
      'Invalid configuration:\n  ARTIFACT_S3_SECRET_ACCESS_KEY: ARTIFACT_S3_ACCESS_KEY_ID and ' +
        'ARTIFACT_S3_SECRET_ACCESS_KEY are set together',
    );
  }
  const canaryHosts: { configured: CanaryOrigin[]; local: boolean } = {
    configured: e.CANARY_HOSTS,
    local: e.CANARY_HOSTS.length === 0 && e.ALLOW_PRIVATE_NETWORKS,
  };
  return {
    rootDir: root,
    port: e.PORT,
    host: e.HOST ?? '127.0.0.1',
    dataDir,
    databaseUrl: e.DATABASE_URL,
    temporalAddress: e.TEMPORAL_ADDRESS,
    temporalNamespace: e.TEMPORAL_NAMESPACE ?? 'default',
    // The console links each task to its workflow there; `npm start` fills it with the embedded server's UI.
    temporalUiUrl: e.TEMPORAL_UI_URL?.replace(/\/+$/, ''),
    taskQueue: e.TEMPORAL_TASK_QUEUE ?? 'marketplace',
    temporalCli: e.TEMPORAL_CLI,
    // The embedded dev server's Web UI, at Temporal's own default port unless set (0: any free port).
    temporalUiPort: e.TEMPORAL_UI_PORT ?? DEFAULT_TEMPORAL_UI_PORT,
    adminApiKey: e.ADMIN_API_KEY,
    metricsToken: e.METRICS_TOKEN,
    workerMetricsPort: e.WORKER_METRICS_PORT,
    strongModelsOverride: e.STRONG_MODELS,
    strongModelsFile: path.resolve(root, e.STRONG_MODELS_FILE ?? 'config/strong-models.txt'),
    domainPolicyFile: path.resolve(root, e.DOMAIN_POLICY_FILE ?? 'config/domain-policy.json'),
    allowPrivateNetworks: e.ALLOW_PRIVATE_NETWORKS,
    apiRunsWorkflows: e.API_RUNS_WORKFLOWS,
    localSolver: ['on', 'true', '1'].includes(localSolver),
    localSolverBackends: {
      chatUpstreamUrl: e.CHAT_UPSTREAM_URL,
      chatUpstreamApiKey: e.CHAT_UPSTREAM_API_KEY,
      chatModels: (e.CHAT_MODELS ?? '')
        .split(',')
        .map((model) => model.trim())
        .filter(Boolean),
      searchIndexDir: e.SEARCH_INDEX_DIR === undefined ? undefined : path.resolve(e.SEARCH_INDEX_DIR),
      searxngUrl: e.SEARXNG_URL,
      braveApiKey: e.BRAVE_API_KEY,
      chromiumPath: e.CHROMIUM_PATH,
      maxConcurrent: e.SOLVER_MAX_CONCURRENT,
      chatMaxConcurrent: e.SOLVER_CHAT_MAX_CONCURRENT,
      browserPages: e.BROWSER_PAGES,
    },
    logLevel: e.LOG_LEVEL ?? 'info',
    logFormat: logFormatOf(e.LOG_FORMAT),
    bodyLimitBytes: e.BODY_LIMIT_BYTES,
    platformFeePercent: e.PLATFORM_FEE_PERCENT,
    defaultWebTaskPricePoints: e.DEFAULT_WEB_TASK_PRICE_POINTS,
    defaultChatPricePoints: e.DEFAULT_CHAT_PRICE_POINTS,
    defaultTaskTimeoutSeconds: e.DEFAULT_TASK_TIMEOUT_SECONDS,
    chatTimeoutSeconds: e.CHAT_TIMEOUT_SECONDS,
    sseKeepAliveMs: e.SSE_KEEPALIVE_MS,
    maxTaskAttempts: e.MAX_TASK_ATTEMPTS,
    attemptTimeoutSeconds: e.ATTEMPT_TIMEOUT_SECONDS,
    acceptTimeoutMs: e.ACCEPT_TIMEOUT_MS,
    heartbeatIntervalMs: e.HEARTBEAT_INTERVAL_MS,
    rateLimitPerMinute: e.RATE_LIMIT_PER_MINUTE,
    // Per client address (src/http/address-limits.ts), shared by every API node.
    addressLimits: {
      register: e.REGISTER_LIMIT_PER_HOUR,
      unauthenticated: e.UNAUTHENTICATED_LIMIT_PER_MINUTE,
      solverConnect: e.SOLVER_CONNECT_LIMIT_PER_MINUTE,
    },
    /** CIDR ranges of the proxies whose X-Forwarded-For names the client; none by default. */
    trustProxy: e.TRUST_PROXY,
    queueLimitPerTaskType: e.QUEUE_LIMIT_PER_TASK_TYPE,
    shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
    webhookRetryForSeconds: e.WEBHOOK_RETRY_FOR_SECONDS,
    webhookTimeoutMs: e.WEBHOOK_TIMEOUT_MS,
    trust: {
      minScore: e.TRUST_MIN_SCORE,
      probationCanaries: e.TRUST_PROBATION_CANARIES,
      halfLifeSeconds: e.TRUST_HALF_LIFE_HOURS * 3600,
      canaryEveryTasks: e.CANARY_EVERY_TASKS,
      redundantRunFraction: e.REDUNDANT_RUN_FRACTION,
      verificationStartFraction: e.VERIFICATION_START_FRACTION,
      searchCanaries: e.CANARY_SEARCH_ORACLE !== undefined,
      checkPriceCeilingPoints: e.CHECK_PRICE_CEILING_POINTS,
      defaultHoldPoints: { web: e.DEFAULT_WEB_TASK_PRICE_POINTS, chat: e.DEFAULT_CHAT_PRICE_POINTS },
      pageCanaries: canaryHosts.configured.length > 0 || e.ALLOW_PRIVATE_NETWORKS,
      targetFailureRequestCost: Math.ceil(e.RATE_LIMIT_PER_MINUTE / TARGET_FAILED_TASKS_PER_MINUTE),
      vestingSeconds: e.EARNINGS_VESTING_SECONDS,
      vestingChecks: e.EARNINGS_VESTING_CHECKS,
    },
    // What web_search canaries compare solvers' results with (docs/trust.md, "Search canaries"): the
    // bundled solver's own index (SEARCH_INDEX_DIR, or the shipped pages) or a SearXNG instance.
    canarySearchOracle:
      e.CANARY_SEARCH_ORACLE === undefined
        ? undefined
        : {
            ...e.CANARY_SEARCH_ORACLE,
            indexDir:
              e.SEARCH_INDEX_DIR === undefined
                ? path.join(root, 'config/search-index')
                : path.resolve(e.SEARCH_INDEX_DIR),
          },
    canarySweepSeconds: e.CANARY_SWEEP_SECONDS,
    redundantRunSweepSeconds: e.REDUNDANT_RUN_SWEEP_SECONDS,
    canaryHosts,
    resultRetentionSeconds: e.RESULT_RETENTION_SECONDS,
    // The maxAge of a scrape or crawl that gives none (docs/crawl.md, "Page cache"); 0 answers only those that
    // ask with one from the cache.
    pageCacheDefaultMaxAgeMs: e.PAGE_CACHE_DEFAULT_MAX_AGE_SECONDS * 1000,
    // Unset: artifacts are files under DATA_DIR/artifacts (src/artifacts/store.ts).
    artifactS3: e.ARTIFACT_S3_BUCKET
      ? {
          bucket: e.ARTIFACT_S3_BUCKET,
          endpoint: e.ARTIFACT_S3_ENDPOINT,
          region: e.ARTIFACT_S3_REGION ?? 'us-east-1',
          ...(e.ARTIFACT_S3_ACCESS_KEY_ID && e.ARTIFACT_S3_SECRET_ACCESS_KEY
            ? {
                credentials: {
                  accessKeyId: e.ARTIFACT_S3_ACCESS_KEY_ID,
                  secretAccessKey: e.ARTIFACT_S3_SECRET_ACCESS_KEY,
                },
              }
            : {}),
        }
      : undefined,
    nodeId: e.NODE_ID,
    workflowBundlePath: e.WORKFLOW_BUNDLE_PATH,
  };
}

/** Strong-tier model allowlist: STRONG_MODELS wins over the shipped file. */
export function readStrongModels(config: Config): string[] {
  const source =
    config.strongModelsOverride ??
    (fs.existsSync(config.strongModelsFile) ? fs.readFileSync(config.strongModelsFile, 'utf8') : '');
  return source
    .split(/[,\n]/)
    .map((line) => line.replace(/#.*$/, '').trim())
    .filter(Boolean);
}
