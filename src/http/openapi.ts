import { OpenAPIRegistry, OpenApiGeneratorV31, type ResponseConfig } from '@asteasolutions/zod-to-openapi';
import { FIRECRAWL_STATUS } from '../compat/firecrawl';
import { ERROR_STATUS, type ErrorType } from '../errors';
import { z } from '../schemas/zod';
import { errorBodyOf, errorTypesOf, FreeForm, openAiErrorBodyOf, OpenAIValidationErrorBody, StringMap, ValidationErrorBody } from '../schemas/common';
import * as queries from '../schemas/queries';
import * as bodies from '../schemas/requests';
import * as responseSchemas from '../schemas/responses';
import { SolverMarket } from '../schemas/solver-market';
import { STORABLE_TEXT_PATTERN } from '../schemas/text';

/**
 * The OpenAPI 3.1.0 document, generated from the same zod schemas that validate requests. Each route
 * names the error types it answers itself; those of its authentication, rate limit and body parsing
 * are added here, and every status gets the one error schema generated from ERROR_STATUS.
 */

type Auth = 'none' | 'bearer' | 'admin' | 'metrics';
interface RouteDoc {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  path: string;
  summary: string;
  tag: string;
  auth: Auth;
  body?: z.ZodTypeAny;
  params?: z.AnyZodObject;
  query?: z.AnyZodObject;
  /** The answer says what the request cost (X-Points-Charged, X-Points-Held). */
  cost?: true;
  response?: z.ZodTypeAny;
  headers?: Record<string, string>;
  /** The error types the route's own code answers. */
  errors?: ErrorType[];
  /** The success answer when it is not JSON only. */
  success?: 'png' | 'artifact' | 'sse' | 'websocket' | 'prometheus' | 'events';
  /** Convenience routes name their task in X-Task-Id. */
  taskHeader?: boolean;
  /** Errors in Firecrawl's shape and statuses (src/compat/firecrawl.ts). */
  firecrawl?: boolean;
  /** Errors as OpenAI's error object (src/chat/openai-format.ts). */
  openai?: boolean;
}

/** Creating a task holds points and starts its workflow, or is refused when the queue for its type is full. */
const CREATES_TASK: ErrorType[] = ['insufficient_balance', 'key_spend_limit_reached', 'service_unavailable', 'solvers_busy'];
/** A convenience route also needs an online solver and waits for the verdict (which a cancel may end). */
const RUNS_TASK: ErrorType[] = [...CREATES_TASK, 'no_solver_available', 'solver_failed', 'task_timeout', 'task_cancelled'];
/** A convenience or compatibility route that takes an Idempotency-Key. */
const IDEMPOTENT_RUN: ErrorType[] = ['idempotency_key_reused', 'result_expired', ...RUNS_TASK];
const CHAT: ErrorType[] = ['invalid_trust_mode', 'prompt_safety_violation', 'insufficient_balance', 'key_spend_limit_reached', 'no_strong_solver_available', 'no_solver_within_price', 'solvers_busy', 'model_not_found', 'solver_failed', 'service_unavailable', 'task_timeout', 'task_cancelled'];
/** Firecrawl scrape: a format, option or action this service does not serve is refused before anything is held. */
const FIRECRAWL_SCRAPE: ErrorType[] = ['unsupported_format', 'unsupported_option', 'invalid_action', 'location_unavailable', 'domain_blocked', ...IDEMPOTENT_RUN];
/** v1 names its formats in the request schema: an unserved one is a 422 there. */
const FIRECRAWL_SCRAPE_V1: ErrorType[] = FIRECRAWL_SCRAPE.filter((type) => type !== 'unsupported_format');
const TRUST_MODE = { 'X-Service-Trust-Mode': 'standard (default) or strict' };
/** The same key with the same operation and body answers the first request's task(s); with another, 422 idempotency_key_reused. */
const idempotent = (first: string) => ({
  'Idempotency-Key': `Sent again with the same body, ${first}; with another body (or at another operation), 422 idempotency_key_reused and nothing is done`,
});
const TASK_KEY = idempotent('returns the first task');
const RUN_KEY = idempotent('answers with the first request\'s task');
const SCRAPE_KEY = { ...idempotent('answers with the first scrape\'s tasks'), 'X-Idempotency-Key': 'The same as Idempotency-Key (Firecrawl\'s SDKs send it)' };
const SEARCH_KEY = { ...idempotent('answers with the first search\'s task'), 'X-Idempotency-Key': 'The same as Idempotency-Key (Firecrawl\'s SDKs send it)' };
const ModelParams = z.object({ model: z.string().openapi({ description: 'service/strong or strong' }) });

/** Crawl, batch scrape and map (docs/crawl.md): v2 at the compatibility prefix and at /v2, v1 at the prefix. */
function crawlRouteDocs(): RouteDoc[] {
  const START: ErrorType[] = ['unsupported_format', 'unsupported_option', 'domain_blocked', 'insufficient_balance', 'no_solver_available', 'service_unavailable', 'idempotency_key_reused'];
  const JOB_KEY = { ...idempotent('answers with the first request\'s job'), 'X-Idempotency-Key': 'The same as Idempotency-Key (Firecrawl\'s SDKs send it)' };
  const JOB: ErrorType[] = ['job_not_found'];
  const both = (path: string) => [`/v1/compat/scraper/v2${path}`, `/v2${path}`];
  const docs: RouteDoc[] = [];
  const add = (paths: string[], doc: Omit<RouteDoc, 'path' | 'tag' | 'auth' | 'firecrawl'>) => {
    for (const path of paths) docs.push({ ...doc, path, tag: 'compatibility', auth: 'bearer', firecrawl: true });
  };
  const params = bodies.JobIdParams;
  add(both('/crawl'), { method: 'post', summary: 'Firecrawl v2 crawl: starts a crawl workflow whose pages are proxy_fetch tasks (robots.txt obeyed, the domain policy applied to every URL)', body: bodies.CrawlV2Body, errors: START, headers: JOB_KEY });
  add(['/v1/compat/scraper/v1/crawl'], { method: 'post', summary: 'Firecrawl v1 crawl (the same job, v1 option names)', body: bodies.CrawlV1Body, errors: START, headers: JOB_KEY });
  add([...both('/crawl/active'), '/v1/compat/scraper/v1/crawl/active'], { method: 'get', summary: 'The account\'s crawls still running' });
  for (const [prefix, job] of [['/v2/crawl', 'crawl'], ['/v2/batch/scrape', 'batch scrape'], ['/v1/crawl', 'crawl or batch scrape'], ['/v1/batch/scrape', 'batch scrape']] as const) {
    const paths = prefix.startsWith('/v2') ? both(prefix.slice(3)) : [`/v1/compat/scraper${prefix}`];
    add(paths.map((path) => `${path}/{id}`), { method: 'get', summary: `A ${job}'s status, counts, cost and documents, paged by \`next\` (skip, limit)`, params, query: queries.CrawlStatusQuery, errors: JOB });
    add(paths.map((path) => `${path}/{id}`), { method: 'delete', summary: `Cancel a ${job}: pending pages stop at once, running pages' tasks are cancelled; only pages done are charged`, params, errors: JOB });
    add(paths.map((path) => `${path}/{id}/errors`), { method: 'get', summary: `A ${job}'s failed pages and the URLs robots.txt kept it from`, params, errors: JOB });
  }
  add(['/v1/compat/scraper/v1/crawl/{id}/errors'], { method: 'delete', summary: 'The same errors, at the method firecrawl-js 1.x uses', params, errors: JOB });
  add(both('/batch/scrape'), { method: 'post', summary: 'Firecrawl v2 batch scrape: a list of URLs as one job (pages are proxy_fetch tasks)', body: bodies.BatchScrapeV2Body, errors: START, headers: JOB_KEY });
  add(['/v1/compat/scraper/v1/batch/scrape'], { method: 'post', summary: 'Firecrawl v1 batch scrape', body: bodies.BatchScrapeV1Body, errors: START, headers: JOB_KEY });
  const MAP: ErrorType[] = ['domain_blocked', ...RUNS_TASK];
  add(both('/map'), { method: 'post', cost: true, summary: 'Firecrawl v2 map: the site\'s URLs from its sitemaps and the start page\'s links (one proxy_fetch task)', body: bodies.MapBody, errors: MAP });
  add(['/v1/compat/scraper/v1/map'], { method: 'post', cost: true, summary: 'Firecrawl v1 map (links as strings)', body: bodies.MapBody, errors: MAP });
  return docs;
}

export const ROUTES: RouteDoc[] = [
  { method: 'get', path: '/health', summary: 'Liveness', tag: 'health', auth: 'none', response: StringMap },
  { method: 'get', path: '/metrics', summary: 'Prometheus figures of this node (text exposition format), for METRICS_TOKEN or the admin key (docs/metrics.md)', tag: 'health', auth: 'metrics', success: 'prometheus' },
  { method: 'post', path: '/v1/register', summary: 'Register an account; returns account_id and api_key (shown once); REGISTER_LIMIT_PER_HOUR per client address', tag: 'account', auth: 'none', response: StringMap, errors: ['rate_limited'] },
  { method: 'get', path: '/v1/profile', summary: 'The calling account', tag: 'account', auth: 'bearer' },
  { method: 'get', path: '/v1/balance', summary: 'Points balance, and a solver\'s earnings not vested yet', tag: 'account', auth: 'bearer', response: responseSchemas.Balance },
  { method: 'get', path: '/v1/account/ledger', summary: 'Every entry that moved the account\'s points, newest first, paged by cursor', tag: 'account', auth: 'bearer', query: queries.LedgerHistoryQuery, response: responseSchemas.LedgerPage },
  { method: 'get', path: '/v1/account/ledger/summary', summary: 'The account\'s ledger summed by UTC day and task type', tag: 'account', auth: 'bearer', query: queries.LedgerSummaryQuery, response: responseSchemas.LedgerSummary },
  { method: 'post', path: '/v1/account/keys', summary: 'Create a named API key (the key is shown once), optionally with a spend limit per UTC day or in total', tag: 'account', auth: 'bearer', body: bodies.CreateApiKeyBody, response: responseSchemas.CreatedApiKey, errors: ['restricted_api_key'] },
  { method: 'get', path: '/v1/account/keys', summary: 'The account\'s API keys (prefix, name, created, last used; never the key)', tag: 'account', auth: 'bearer', response: responseSchemas.ApiKeyList, errors: ['restricted_api_key'] },
  { method: 'patch', path: '/v1/account/keys/{key_id}', summary: 'Rename a key or set its spend limit (null removes it); a task whose hold does not fit what is left is 402 key_spend_limit_reached', tag: 'account', auth: 'bearer', params: bodies.KeyIdParams, body: bodies.UpdateApiKeyBody, response: responseSchemas.ApiKeyInfo, errors: ['restricted_api_key', 'api_key_not_found'] },
  { method: 'delete', path: '/v1/account/keys/{key_id}', summary: 'Revoke an API key, on every node at once (idempotent), closing the solver sockets opened with it; the last live key, or the last unrestricted one, only with allow_last=true; a restricted key may revoke only itself', tag: 'account', auth: 'bearer', params: bodies.KeyIdParams, query: queries.RevokeApiKeyQuery, response: responseSchemas.ApiKeyInfo, errors: ['restricted_api_key', 'api_key_not_found', 'last_api_key'] },
  { method: 'get', path: '/v1/account/webhook-secret', summary: 'The secret that signs the account\'s webhook deliveries (made on first use)', tag: 'account', auth: 'bearer', response: responseSchemas.WebhookSecret },
  { method: 'post', path: '/v1/account/webhook-secret/rotate', summary: 'Replace the webhook secret; deliveries from now on are signed with the new one, and for 24 h with the replaced one too (two signatures)', tag: 'account', auth: 'bearer', response: responseSchemas.WebhookSecret },
  { method: 'put', path: '/v1/account/webhook', summary: 'Set the account\'s default webhook: every task created from now on (POST /v1/tasks, the convenience endpoints, scrape and search compat, chat) carries it unless its request names its own', tag: 'account', auth: 'bearer', body: bodies.AccountWebhookBody, response: responseSchemas.AccountWebhook, errors: ['domain_blocked'] },
  { method: 'get', path: '/v1/account/webhook', summary: 'The account\'s default webhook', tag: 'account', auth: 'bearer', response: responseSchemas.AccountWebhook, errors: ['webhook_not_found'] },
  { method: 'delete', path: '/v1/account/webhook', summary: 'Remove the account\'s default webhook (tasks created before keep theirs)', tag: 'account', auth: 'bearer', response: responseSchemas.AccountWebhook, errors: ['webhook_not_found'] },
  { method: 'patch', path: '/v1/account/settings', summary: 'Change account settings', tag: 'account', auth: 'bearer', body: bodies.AccountSettingsBody, response: bodies.AccountSettingsBody },
  { method: 'post', path: '/v1/tasks', summary: 'Create a web task, optionally with a webhook told of its end', tag: 'tasks', auth: 'bearer', body: bodies.CreateTaskBody, response: responseSchemas.TaskRecord, headers: TASK_KEY, errors: ['domain_blocked', 'idempotency_key_reused', ...CREATES_TASK] },
  { method: 'get', path: '/v1/tasks', summary: 'The account\'s tasks, newest first, filtered and paged by cursor (records without result)', tag: 'tasks', auth: 'bearer', query: queries.ListTasksQuery, response: responseSchemas.TaskListResponse },
  { method: 'get', path: '/v1/tasks/{task_id}', summary: 'Poll a task', tag: 'tasks', auth: 'bearer', params: bodies.TaskIdParams, response: responseSchemas.TaskRecord, errors: ['task_not_found'] },
  { method: 'get', path: '/v1/tasks/{task_id}/artifacts/{name}', summary: 'One large part of a completed task\'s result as its own bytes (a screenshot\'s PNG, a page\'s HTML), for the account\'s key; Firecrawl scrapes answer `screenshot` with this URL', tag: 'tasks', auth: 'bearer', params: bodies.TaskArtifactParams, errors: ['task_not_found', 'artifact_not_found', 'result_expired'], success: 'artifact' },
  { method: 'get', path: '/v1/tasks/{task_id}/webhooks', summary: 'The task\'s webhook and the log of its deliveries, every attempt included', tag: 'tasks', auth: 'bearer', params: bodies.TaskIdParams, response: responseSchemas.WebhookLog, errors: ['task_not_found'] },
  { method: 'post', path: '/v1/tasks/{task_id}/webhooks/{event}/resend', summary: 'Send a failed webhook delivery again: it goes back to the durable delivery path with a new retry window (a delivered or pending one is refused, so two resends at once send it once)', tag: 'tasks', auth: 'bearer', params: bodies.WebhookDeliveryParams, response: responseSchemas.WebhookResent, errors: ['task_not_found', 'webhook_delivery_not_found', 'webhook_delivery_not_failed'] },
  { method: 'post', path: '/v1/tasks/{task_id}/cancel', summary: 'Cancel a queued or running task: its solver is stopped, its hold released, its state cancelled (idempotent)', tag: 'tasks', auth: 'bearer', params: bodies.TaskIdParams, response: responseSchemas.TaskRecord, errors: ['task_not_found', 'task_already_finished'] },
  { method: 'post', path: '/v1/fetch', cost: true, summary: 'Fetch a page as markdown or HTML (no browser)', tag: 'convenience', auth: 'bearer', headers: RUN_KEY, body: bodies.FetchBody, errors: ['domain_blocked', ...IDEMPOTENT_RUN], taskHeader: true },
  { method: 'post', path: '/v1/search', cost: true, summary: 'Web search', tag: 'convenience', auth: 'bearer', headers: RUN_KEY, body: bodies.SearchBody, errors: IDEMPOTENT_RUN, taskHeader: true },
  { method: 'post', path: '/v1/screenshot', cost: true, summary: 'PNG screenshot of the rendered page (JSON, or raw PNG with Accept: image/png)', tag: 'convenience', auth: 'bearer', headers: RUN_KEY, body: bodies.ScreenshotBody, errors: ['domain_blocked', ...IDEMPOTENT_RUN], taskHeader: true, success: 'png' },
  { method: 'post', path: '/v1/snapshot', cost: true, summary: 'Structured snapshot of the rendered page', tag: 'convenience', auth: 'bearer', headers: RUN_KEY, body: bodies.SnapshotBody, errors: ['domain_blocked', ...IDEMPOTENT_RUN], taskHeader: true },
  { method: 'post', path: '/v1/chat/completions', cost: true, summary: 'OpenAI-compatible chat completion (JSON or SSE)', tag: 'inference', auth: 'bearer', body: bodies.ChatCompletionBody, headers: TRUST_MODE, errors: CHAT, success: 'sse', openai: true },
  { method: 'post', path: '/v1/inference/chat/completions', cost: true, summary: 'Temporary alias of /v1/chat/completions', tag: 'inference', auth: 'bearer', body: bodies.ChatCompletionBody, headers: TRUST_MODE, errors: CHAT, success: 'sse', openai: true },
  { method: 'get', path: '/v1/models', summary: 'Public models', tag: 'inference', auth: 'none', openai: true },
  { method: 'get', path: '/v1/models/{model}', summary: 'A model descriptor (service/strong or strong)', tag: 'inference', auth: 'none', params: ModelParams, errors: ['model_not_found'], openai: true },
  { method: 'post', path: '/v1/compat/scraper/scrape', cost: true, summary: 'Firecrawl v1 compatible scrape (docs/decisions.md lists which options are served, accepted or refused)', tag: 'compatibility', auth: 'bearer', body: bodies.ScrapeBody, headers: SCRAPE_KEY, errors: FIRECRAWL_SCRAPE_V1, firecrawl: true },
  { method: 'post', path: '/v1/compat/scraper/v1/scrape', cost: true, summary: 'The same scrape at the path Firecrawl SDKs build (apiUrl = {base_url}/v1/compat/scraper)', tag: 'compatibility', auth: 'bearer', body: bodies.ScrapeBody, headers: SCRAPE_KEY, errors: FIRECRAWL_SCRAPE_V1, firecrawl: true },
  { method: 'post', path: '/v1/compat/scraper/v2/scrape', cost: true, summary: 'Firecrawl v2 compatible scrape: fetched, rendered when the page needs it, actions run in the browser; unserved formats, options and actions are 400 naming them', tag: 'compatibility', auth: 'bearer', body: bodies.ScrapeV2Body, headers: SCRAPE_KEY, errors: FIRECRAWL_SCRAPE, firecrawl: true },
  { method: 'post', path: '/v2/scrape', cost: true, summary: 'The same v2 scrape at the path firecrawl-py 4.x builds (it drops the base path of its apiUrl)', tag: 'compatibility', auth: 'bearer', body: bodies.ScrapeV2Body, headers: SCRAPE_KEY, errors: FIRECRAWL_SCRAPE, firecrawl: true },
  { method: 'post', path: '/v1/compat/scraper/v1/search', cost: true, summary: 'Firecrawl v1 compatible search (a web_search task; data is a list of {url,title,description})', tag: 'compatibility', auth: 'bearer', body: bodies.FirecrawlSearchBody, headers: SEARCH_KEY, errors: ['unsupported_format', ...IDEMPOTENT_RUN], firecrawl: true },
  { method: 'post', path: '/v1/compat/scraper/v2/search', cost: true, summary: 'Firecrawl v2 compatible search (a web_search task; data.web lists {url,title,description,position})', tag: 'compatibility', auth: 'bearer', body: bodies.FirecrawlSearchBody, headers: SEARCH_KEY, errors: ['unsupported_format', ...IDEMPOTENT_RUN], firecrawl: true },
  { method: 'post', path: '/v2/search', cost: true, summary: 'The same v2 search at the path firecrawl-py 4.x builds', tag: 'compatibility', auth: 'bearer', body: bodies.FirecrawlSearchBody, headers: SEARCH_KEY, errors: ['unsupported_format', ...IDEMPOTENT_RUN], firecrawl: true },
  ...crawlRouteDocs(),
  { method: 'post', path: '/v1/solver/capabilities', summary: 'Register or replace solver capabilities', tag: 'solver', auth: 'bearer', body: bodies.SolverCapabilitiesBody },
  { method: 'get', path: '/v1/solver/stats', summary: 'Solver statistics, with its reputation per task type and any quarantine (docs/trust.md)', tag: 'solver', auth: 'bearer' },
  { method: 'get', path: '/v1/solver/market', summary: 'The market a solver works in: strong-tier allowlist, platform fee, clients\' default maximum prices, protocol version, timeouts, server time', tag: 'solver', auth: 'bearer', response: SolverMarket },
  { method: 'get', path: '/v1/solver/attempts', summary: 'The calling solver\'s latest attempts (at most 50, of the last 7 days), newest first: task, type, price, outcome and the error that ended any failed one', tag: 'solver', auth: 'bearer', response: responseSchemas.SolverAttempts },
  { method: 'get', path: '/v1/solver/schemas', summary: 'JSON Schema (draft 2020-12) of every solver protocol frame and result type (docs/solver-schemas.json)', tag: 'solver', auth: 'bearer' },
  { method: 'get', path: '/v1/solver/connect', summary: 'WebSocket upgrade for solver protocol v1 (see docs/solver-protocol.md); a request without the upgrade is 404', tag: 'solver', auth: 'bearer', errors: ['not_found'], success: 'websocket' },
  { method: 'post', path: '/v1/admin/deposit', summary: 'Deposit points', tag: 'admin', auth: 'admin', body: bodies.DepositBody, response: StringMap, headers: { 'Idempotency-Key': 'A deposit sent again with the same key, account and amount applies once; the same key and account with another amount is 422 idempotency_key_reused (a key is the account\'s: for another account it is another deposit)' }, errors: ['account_not_found', 'idempotency_key_reused'] },
  { method: 'post', path: '/v1/admin/domain-policy/reload', summary: 'Reload the domain policy on every node', tag: 'admin', auth: 'admin', errors: ['invalid_domain_policy'] },
  { method: 'post', path: '/v1/admin/reset-rate-limit', summary: 'Clear an account\'s rate-limit counter and simulation', tag: 'admin', auth: 'admin', body: bodies.AccountIdBody, errors: ['account_not_found'] },
  { method: 'post', path: '/v1/admin/simulate-rate-limit', summary: 'Rate-limit an account after N more requests', tag: 'admin', auth: 'admin', body: bodies.SimulateRateLimitBody, errors: ['account_not_found'] },
  { method: 'get', path: '/v1/admin/quarantines', summary: 'Solvers in quarantine, with the evidence and what is held of their earnings (docs/trust.md)', tag: 'admin', auth: 'admin' },
  { method: 'get', path: '/v1/admin/solvers/{solver_id}/trust', summary: 'One solver\'s reputation per task type (with its verified passes and failures), whether it is a verifier, quarantines, held earnings, redundant-run disagreements and verifications that proved it wrong, and inflated chat usage reports (`usage_inflations`), with their evidence', tag: 'admin', auth: 'admin', params: bodies.SolverIdParams, errors: ['account_not_found'] },
  { method: 'post', path: '/v1/admin/solvers/{solver_id}/verifier', summary: 'Mark a solver a verifier, or unmark it: sampled client tasks are re-run by a verifier online for their type, whose disagreement proves the result wrong and refunds it (docs/trust.md, "Verified client tasks")', tag: 'admin', auth: 'admin', params: bodies.SolverIdParams, body: bodies.SetVerifierBody, errors: ['account_not_found'] },
  { method: 'post', path: '/v1/admin/solvers/{solver_id}/quarantine/confirm', summary: 'Confirm a solver\'s quarantine: it stays quarantined, and its unvested earnings are forfeited to refund the clients of those tasks (docs/trust.md, "Escrow and refunds")', tag: 'admin', auth: 'admin', params: bodies.SolverIdParams, body: bodies.ClearQuarantineBody, errors: ['account_not_found', 'quarantine_not_found'] },
  { method: 'post', path: '/v1/admin/solvers/{solver_id}/quarantine/clear', summary: 'Clear a solver\'s quarantine and release its held earnings', tag: 'admin', auth: 'admin', params: bodies.SolverIdParams, body: bodies.ClearQuarantineBody, errors: ['account_not_found', 'quarantine_not_found'] },
  { method: 'get', path: '/v1/admin/tasks', summary: 'Any account\'s tasks, newest first, found by id, account, type, status and time, paged by cursor (records without result, with account_id)', tag: 'admin', auth: 'admin', query: queries.AdminTasksQuery },
  { method: 'get', path: '/v1/admin/tasks/{task_id}', summary: 'One task in full: its record and result, account_id, every attempt (node, price, outcome, error, times), every ledger entry it wrote on any account, and workflow_url (its workflow in the Temporal UI, null when TEMPORAL_UI_URL is unset)', tag: 'admin', auth: 'admin', params: bodies.TaskIdParams, errors: ['task_not_found'] },
  { method: 'get', path: '/v1/admin/solvers', summary: 'Solvers online: node, capabilities with price, slots and slots taken, and reputation per task type', tag: 'admin', auth: 'admin' },
  { method: 'get', path: '/v1/admin/events', summary: 'Server-sent events for the console (docs/console.md): `history` (this node\'s queue snapshots of the last hour) first, then `status` (a queue snapshot every 5 s and shortly after tasks end) and `task_finished` ({task_id, status}, as each task ends); without Accept: text/event-stream, the samples once as JSON', tag: 'admin', auth: 'admin', success: 'events' },
  { method: 'get', path: '/v1/admin/status', summary: 'Database and Temporal reachability, counts', tag: 'admin', auth: 'admin' },
  { method: 'post', path: '/v1/admin/tasks/{task_id}/complete', summary: 'Complete a task manually and pay the named solver; the result must match the task type\'s result schema (docs/solver-schemas.json), 422 at its loc otherwise', tag: 'admin', auth: 'admin', body: bodies.AdminCompleteTaskBody, params: bodies.TaskIdParams, errors: ['task_not_found', 'account_not_found', 'task_already_finished'] },
];

// rate_limited: per account once authenticated, per client address for a missing or unknown key.
const AUTH_ERRORS: Record<Auth, ErrorType[]> = {
  none: [],
  bearer: ['authentication_required', 'invalid_api_key', 'rate_limited'],
  admin: ['admin_authentication_required', 'invalid_admin_key', 'admin_disabled', 'rate_limited'],
  metrics: ['metrics_authentication_required', 'invalid_metrics_token', 'metrics_disabled'],
};
// The body is read (and limited) before any route runs, so every route that takes one can answer these:
// a Content-Encoding it does not decode is 415, a body that does not decode as its encoding says is 400.
const BODY_ERRORS: ErrorType[] = ['bad_request', 'payload_too_large', 'unsupported_media_type'];
const ADMIN_HEADERS = ['Authorization', 'ADMIN_API_KEY', 'X-Admin-API-Key'];

const firecrawlStatus = (status: number) => FIRECRAWL_STATUS[status] ?? status;

const firecrawlErrorBodies = new Map<number, z.ZodTypeAny>();

/** Firecrawl's failure body `{success:false, error, code}`, `code` one of the types answered with that status. */
function firecrawlErrorBodyOf(status: number): z.ZodTypeAny {
  const body =
    firecrawlErrorBodies.get(status) ??
    z
      .object({ success: z.literal(false), error: z.string(), code: z.enum(errorTypesOf(status, firecrawlStatus) as [ErrorType, ...ErrorType[]]) })
      .passthrough()
      .openapi(`ScrapeError${status}`);
  firecrawlErrorBodies.set(status, body);
  return body;
}

const ScrapeValidationError = ValidationErrorBody.extend({ success: z.literal(false), error: z.string() }).openapi('ScrapeValidationError');

/** One server-sent event of a streamed completion (one `data:` line each). */
const SseEvent = z
  .object({ data: z.string().openapi({ description: 'A chat.completion.chunk, an {"error":{"message","type","param","code"}} object when the stream fails, or [DONE] at its end' }) })
  .passthrough()
  .openapi('ChatCompletionEvent');

/** One event of GET /v1/admin/events (`event:` names it, `data:` is one JSON object). */
const MarketEventSchema = z
  .object({
    event: z.enum(['history', 'status', 'task_finished']),
    data: z.string().openapi({ description: 'history: {samples:[{at, queues}]}; status: {at, queues} (queues as in GET /v1/admin/status); task_finished: {task_id, status}' }),
  })
  .openapi('MarketEvent');

type Header = { description: string; required?: boolean; schema: { type: 'string' | 'integer' } };
const requestIdHeader: Header = { description: 'The request id (the caller\'s X-Request-Id when it is sane)', required: true, schema: { type: 'string' } };
const rateLimitHeaders = (required: boolean): Record<string, Header> => ({
  'X-RateLimit-Limit': { description: 'Requests allowed per window', required, schema: { type: 'integer' } },
  'X-RateLimit-Remaining': { description: 'Requests left in this window', required, schema: { type: 'integer' } },
  'X-RateLimit-Reset': { description: 'Unix time (seconds) at which the window ends', required, schema: { type: 'integer' } },
});

const retryAfterHeader: Header = {
  description: 'Seconds until the rate-limit window ends (at least 1), or (solvers_busy) until a solver slot is likely free',
  required: true,
  schema: { type: 'integer' },
};

const COST_HEADERS: Record<string, Header> = {
  'X-Points-Charged': { description: 'Points charged for this request (decimal string; a stream says it in its finish chunk)', required: false, schema: { type: 'string' } },
  'X-Points-Held': { description: 'Points held while it ran (its maximum price; the rest was released)', required: false, schema: { type: 'string' } },
};

/** The headers of one answer of a route: the request id always, the rate-limit ones once authenticated. */
function headersOf(route: RouteDoc, status: number): Record<string, Header> {
  // The upgrade is answered on the socket, outside the app (src/dispatch/ws-server.ts); only a plain GET reaches it.
  if (route.success === 'websocket') return status === 404 ? { 'X-Request-Id': requestIdHeader } : status === 429 ? { ...rateLimitHeaders(true), 'Retry-After': retryAfterHeader } : {};
  const headers: Record<string, Header> = { 'X-Request-Id': requestIdHeader };
  // 401 is before the count; 413, 415, a body that does not decode (a 400) and malformed JSON (a 422) are refused before authentication.
  if (route.auth === 'bearer' && ![401, 413, 415].includes(status)) Object.assign(headers, rateLimitHeaders(status !== 422 && !(status === 400 && route.method !== 'get')));
  // A per-address refusal carries the address's counter in the same headers.
  if (status === 429) Object.assign(headers, route.auth === 'bearer' ? {} : rateLimitHeaders(true), { 'Retry-After': retryAfterHeader });
  if (status === 503 && route.errors?.includes('no_solver_available')) headers['Retry-After'] = { description: 'Seconds after which a solver is likely online (no_solver_available)', required: false, schema: { type: 'integer' } };
  if (route.cost && status === 200) Object.assign(headers, COST_HEADERS);
  if (route.taskHeader && [200, 502, 504].includes(status)) headers['X-Task-Id'] = { description: 'The task that served the request', required: status === 200, schema: { type: 'string' } };
  return headers;
}

function successOf(route: RouteDoc): [string, ResponseConfig] {
  const json = { 'application/json': { schema: route.response ?? FreeForm } };
  const headers = headersOf(route, 200);
  if (route.success === 'websocket') return ['101', { description: 'Switching Protocols: the solver WebSocket' }];
  if (route.success === 'png') return ['200', { description: 'The screenshot as JSON, or the raw PNG with Accept: image/png', headers, content: { ...json, 'image/png': { schema: z.string().openapi({ format: 'binary' }) } } }];
  if (route.success === 'artifact') {
    const binary = { schema: z.string().openapi({ format: 'binary' }) };
    return ['200', { description: 'The bytes, with the content type they were stored with', headers, content: { 'image/png': binary, 'text/html': binary, 'text/markdown': binary } }];
  }
  if (route.success === 'prometheus') return ['200', { description: 'Prometheus text exposition format 0.0.4', headers, content: { 'text/plain': { schema: z.string() } } }];
  if (route.success === 'events') return ['200', { description: 'With Accept: text/event-stream, a stream that stays open (`: keep-alive` comments every SSE_KEEPALIVE_MS); otherwise {samples} as JSON: the last hour\'s snapshots and one taken now', headers, content: { ...json, 'text/event-stream': { schema: MarketEventSchema } } }];
  if (route.success === 'sse') return ['200', { description: 'The completion as JSON, or server-sent events with stream: true', headers, content: { ...json, 'text/event-stream': { schema: SseEvent } } }];
  return ['200', { description: 'Success', headers, content: json }];
}

function responsesOf(route: RouteDoc): Record<string, ResponseConfig> {
  const takesBody = route.method !== 'get';
  const types = [...AUTH_ERRORS[route.auth], ...(takesBody ? BODY_ERRORS : []), ...(route.errors ?? [])];
  const statusOf = (type: ErrorType) => (route.firecrawl ? firecrawlStatus(ERROR_STATUS[type]) : ERROR_STATUS[type]);
  const byStatus = new Map<number, ErrorType[]>();
  for (const type of types) byStatus.set(statusOf(type), [...(byStatus.get(statusOf(type)) ?? []), type]);

  const [successStatus, success] = successOf(route);
  const responses: Record<string, ResponseConfig> = { [successStatus]: success };
  for (const [status, own] of [...byStatus].sort(([a], [b]) => a - b)) {
    const schema = route.firecrawl ? firecrawlErrorBodyOf(status) : route.openai ? openAiErrorBodyOf(status) : errorBodyOf(status);
    responses[String(status)] = { description: own.join(', '), headers: headersOf(route, status), content: { 'application/json': { schema } } };
  }
  // Any body can be malformed JSON, and every body and path parameter is validated; a route's own 422
  // (idempotency_key_reused) is the other shape that status can have.
  if (takesBody || route.params || route.query) {
    const validation = route.firecrawl ? ScrapeValidationError : route.openai ? OpenAIValidationErrorBody : ValidationErrorBody;
    const own = byStatus.get(422);
    const errorBody = own && (route.firecrawl ? firecrawlErrorBodyOf(422) : route.openai ? openAiErrorBodyOf(422) : errorBodyOf(422));
    responses['422'] = {
      description: own ? `Validation error, or ${own.join(', ')}` : 'Validation error',
      headers: headersOf(route, 422),
      content: { 'application/json': { schema: errorBody ? z.union([validation, errorBody]) : validation } },
    };
  }
  return responses;
}

type JsonSchema = Record<string, any>;

/** Any JSON value PostgreSQL can store: the free-form parts of request bodies. */
const STORABLE_JSON: JsonSchema = {
  description: 'Any JSON value whose strings and object keys hold no NUL (and no unpaired UTF-16 surrogate, 422 string_unicode)',
  anyOf: [
    { type: 'string', pattern: STORABLE_TEXT_PATTERN },
    { type: 'number' },
    { type: 'boolean' },
    { type: 'null' },
    { type: 'array', items: { $ref: '#/components/schemas/StorableJson' } },
    { type: 'object', propertyNames: { pattern: STORABLE_TEXT_PATTERN }, additionalProperties: { $ref: '#/components/schemas/StorableJson' } },
  ],
};

const isEmptySchema = (schema: unknown) => schema === true || (typeof schema === 'object' && schema !== null && Object.keys(schema).length === 0);

/**
 * Writes the text rule of src/schemas/text.ts into a request schema: every free string gets its
 * pattern, every object its propertyNames, and every free-form value becomes StorableJson.
 */
function constrainText(schema: JsonSchema, components: Record<string, JsonSchema>, seen: Set<string>): void {
  if (typeof schema.$ref === 'string') {
    const name = schema.$ref.split('/').pop()!;
    if (!seen.has(name) && components[name]) {
      seen.add(name);
      constrainText(components[name], components, seen);
    }
    return;
  }
  const types: string[] = Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [];
  if (types.includes('string') && !schema.pattern && !schema.enum && !schema.format && schema.const === undefined) schema.pattern = STORABLE_TEXT_PATTERN;
  if (types.includes('object')) {
    schema.propertyNames = { pattern: STORABLE_TEXT_PATTERN };
    for (const property of Object.values<JsonSchema>(schema.properties ?? {})) constrainText(property, components, seen);
    if (schema.additionalProperties === undefined || isEmptySchema(schema.additionalProperties)) schema.additionalProperties = { $ref: '#/components/schemas/StorableJson' };
    else if (typeof schema.additionalProperties === 'object') constrainText(schema.additionalProperties, components, seen);
  }
  if (types.includes('array')) {
    if (schema.items === undefined || isEmptySchema(schema.items)) schema.items = { $ref: '#/components/schemas/StorableJson' };
    else constrainText(schema.items, components, seen);
  }
  for (const key of ['anyOf', 'oneOf', 'allOf']) for (const branch of schema[key] ?? []) constrainText(branch, components, seen);
}

function constrainRequests(document: JsonSchema): void {
  const components = document.components.schemas as Record<string, JsonSchema>;
  components.StorableJson = STORABLE_JSON;
  const seen = new Set<string>(['StorableJson']);
  for (const operations of Object.values<JsonSchema>(document.paths)) {
    for (const operation of Object.values<JsonSchema>(operations)) {
      for (const media of Object.values<JsonSchema>(operation.requestBody?.content ?? {})) constrainText(media.schema, components, seen);
      for (const parameter of operation.parameters ?? []) if (parameter.in === 'path') constrainText(parameter.schema, components, seen);
    }
  }
}

let cached: object | undefined;

export function openApiDocument(): object {
  if (cached) return cached;
  const registry = new OpenAPIRegistry();
  registry.register('HTTPValidationError', ValidationErrorBody);
  registry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer', description: 'API key from POST /v1/register' });

  for (const route of ROUTES) {
    const headerParams = {
      ...(route.auth === 'admin' || route.auth === 'metrics' ? Object.fromEntries(ADMIN_HEADERS.map((name) => [name, z.string().optional()])) : {}),
      ...(route.auth === 'bearer' ? { Authorization: z.string().optional() } : {}),
      ...Object.fromEntries(Object.entries(route.headers ?? {}).map(([name, description]) => [name, z.string().optional().openapi({ description })])),
    };
    registry.registerPath({
      method: route.method,
      path: route.path,
      summary: route.summary,
      tags: [route.tag],
      ...(route.auth === 'bearer' ? { security: [{ bearer: [] }] } : {}),
      request: {
        ...(Object.keys(headerParams).length ? { headers: z.object(headerParams) } : {}),
        ...(route.params ? { params: route.params } : {}),
        ...(route.query ? { query: route.query } : {}),
        ...(route.body ? { body: { required: true, content: { 'application/json': { schema: route.body } } } } : {}),
      },
      responses: responsesOf(route),
    });
  }

  const document = new OpenApiGeneratorV31(registry.definitions).generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'Task Marketplace API',
      version: '0.1.0',
      description:
        'Web tasks, chat completions and solver agents. Errors are {"error":{"type","message"}} (one schema per status, ErrorNNN, whose `type` lists the types of that status); validation errors are 422 {"detail":[...]}. On the OpenAI-compatible routes (chat completions, models) an error is OpenAI\'s error object {"error":{"message","type","param","code"}}, `code` the same as `type` (OpenAIErrorNNN), and a 422 keeps its `detail` and adds that object for its first issue. Strings hold no NUL (422 string_pattern_mismatch) and no unpaired UTF-16 surrogate (422 string_unicode).',
    },
  });
  constrainRequests(document as unknown as JsonSchema);
  cached = document;
  return cached;
}

/** The methods documented for a concrete request path (a 405's Allow header), empty when none is. */
export function documentedMethods(requestPath: string): string[] {
  const matches = (template: string) => new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(requestPath);
  // A concrete path is matched before a templated one (OpenAPI's rule): /v2/crawl/active is not /v2/crawl/{id}.
  const concrete = ROUTES.filter((route) => route.path === requestPath);
  const routes = concrete.length > 0 ? concrete : ROUTES.filter((route) => matches(route.path));
  return [...new Set(routes.map((route) => route.method.toUpperCase()))];
}
