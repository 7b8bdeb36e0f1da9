import type { Request, Response } from 'express';
import type { SpendLimit } from '../../db/accounts';
import { decimalText, StringMap } from '../../schemas/common';
import { ApiError } from '../../errors';
import { WEBHOOK_EVENTS, type WebhookSecret } from '../../db/webhooks';
import { LedgerHistoryQuery, LedgerSummaryQuery, PAGE_LIMIT_DEFAULT, RevokeApiKeyQuery } from '../../schemas/queries';
import {
  AccountSettingsBody,
  AccountWebhookBody,
  CreateApiKeyBody,
  KeyIdParams,
  UpdateApiKeyBody,
  type AccountWebhookRequest,
  type CreateApiKeyRequest,
  type SpendLimitRequest,
  type UpdateApiKeyRequest,
} from '../../schemas/requests';
import { accountOf, requireKeyManager } from '../auth';
import * as responses from '../../schemas/responses';
import type { AppDeps } from '../deps';
import { route, type Route } from '../route';
import { addressLimitsOf } from '../rate-limit';
import { decodeCursor, encodeCursor } from '../pagination';
import { parseOrThrow } from '../validation';
import { assertAllowedTarget } from '../target-policy';

/** A spend limit as stored (points as exact decimal text); null removes one, undefined leaves it. */
const spendLimitOf = (limit: SpendLimitRequest | null | undefined): SpendLimit | null | undefined =>
  limit && { points: decimalText(limit.points), period: limit.period };

export function accountRoutes(deps: AppDeps): Route[] {
  const routes: Route[] = [];
  const keyManager = requireKeyManager();

  async function postRegister(req: Request, res: Response) {
    await addressLimitsOf(req).admit(req, 'register');
    const { account, apiKey } = await deps.accounts.createAccount();
    res.locals.log.info({ account_id: account.account_id }, 'account registered');
    res.status(200).json({
      account_id: account.account_id,
      api_key: apiKey,
      created_at: account.created_at,
      note: 'Store this api_key now: it is shown only once.',
    });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/register',
      summary:
        'Register an account; returns account_id and api_key (shown once); REGISTER_LIMIT_PER_HOUR ' +
        'per client address',
      tag: 'account',
      auth: 'none',
      response: StringMap,
      errors: ['rate_limited'],
      handler: postRegister,
    }),
  );

  async function getProfile(_req: Request, res: Response) {
    const account = accountOf(res);
    const balance = await deps.ledger.getBalance(account.account_id);
    res.json({
      account_id: account.account_id,
      created_at: account.created_at,
      settings: { prompt_safety_scan: account.prompt_safety_scan },
      balance,
    });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/profile',
      summary: 'The calling account',
      tag: 'account',
      auth: 'bearer',
      handler: getProfile,
    }),
  );

  async function getBalance(_req: Request, res: Response) {
    const account = accountOf(res);
    res.json({ account_id: account.account_id, ...(await deps.ledger.getBalance(account.account_id)) });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/balance',
      summary:
        "Points balance: every value a decimal string (a solver's vesting detail is GET " + '/v1/solver/earnings)',
      tag: 'account',
      auth: 'bearer',
      response: responses.Balance,
      handler: getBalance,
    }),
  );

  async function getAccountLedger(req: Request, res: Response) {
    const query = parseOrThrow(LedgerHistoryQuery, req.query, ['query']);
    const after = decodeCursor(query.cursor, [(entryId) => /^\d{1,18}$/.test(entryId)]);
    const page = await deps.ledger.ledgerHistory(accountOf(res).account_id, {
      kind: query.kind,
      taskId: query.task_id,
      createdAfter: query.created_after,
      createdBefore: query.created_before,
      beforeEntryId: after?.[0],
      limit: query.limit ?? PAGE_LIMIT_DEFAULT,
    });
    const last = page.entries[page.entries.length - 1];
    res.json({
      data: page.entries,
      has_more: page.hasMore,
      next_cursor: page.hasMore && last ? encodeCursor([last.entry_id]) : null,
    });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/account/ledger',
      summary: "Every entry that moved the account's points, newest first, paged by cursor",
      tag: 'account',
      auth: 'bearer',
      query: LedgerHistoryQuery,
      response: responses.LedgerPage,
      handler: getAccountLedger,
    }),
  );

  async function getAccountLedgerSummary(req: Request, res: Response) {
    const query = parseOrThrow(LedgerSummaryQuery, req.query, ['query']);
    res.json({
      data: await deps.ledger.ledgerSummary(accountOf(res).account_id, {
        createdAfter: query.created_after,
        createdBefore: query.created_before,
      }),
    });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/account/ledger/summary',
      summary: "The account's ledger summed by UTC day and task type",
      tag: 'account',
      auth: 'bearer',
      query: LedgerSummaryQuery,
      response: responses.LedgerSummary,
      handler: getAccountLedgerSummary,
    }),
  );

  async function postAccountKeys(req: Request, res: Response) {
    const body = req.body as CreateApiKeyRequest;
    const spendLimit = spendLimitOf(body.spend_limit);
    const { key, apiKey } = await deps.accounts.createApiKey(accountOf(res).account_id, {
      name: body.name,
      spendLimit,
      restricted: body.restricted ?? Boolean(spendLimit),
    });
    res.json({ ...key, api_key: apiKey });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/account/keys',
      summary:
        'Create a named API key (the key is shown once), optionally with a spend limit per UTC day ' + 'or in total',
      tag: 'account',
      auth: 'bearer',
      body: CreateApiKeyBody,
      response: responses.CreatedApiKey,
      errors: ['restricted_api_key'],
      use: [keyManager],
      handler: postAccountKeys,
    }),
  );

  async function patchAccountKey(req: Request, res: Response) {
    const body = req.body as UpdateApiKeyRequest;
    const keyId = req.params.key_id as string;
    const key = await deps.accounts.updateApiKey(accountOf(res).account_id, keyId, {
      name: body.name,
      spendLimit: spendLimitOf(body.spend_limit),
    });
    if (!key) throw new ApiError('api_key_not_found', `No API key "${keyId}" on this account.`);
    res.json(key);
  }

  routes.push(
    route({
      method: 'patch',
      path: '/v1/account/keys/{key_id}',
      summary:
        'Rename a key or set its spend limit (null removes it); a task whose hold does not fit what ' +
        'is left is 402 key_spend_limit_reached',
      tag: 'account',
      auth: 'bearer',
      params: KeyIdParams,
      body: UpdateApiKeyBody,
      response: responses.ApiKeyInfo,
      errors: ['restricted_api_key', 'api_key_not_found'],
      use: [keyManager],
      handler: patchAccountKey,
    }),
  );

  async function getAccountKeys(_req: Request, res: Response) {
    res.json({ data: await deps.accounts.listApiKeys(accountOf(res).account_id) });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/account/keys',
      summary: "The account's API keys (prefix, name, created, last used; never the key)",
      tag: 'account',
      auth: 'bearer',
      response: responses.ApiKeyList,
      errors: ['restricted_api_key'],
      use: [keyManager],
      handler: getAccountKeys,
    }),
  );

  routes.push(
    route({
      method: 'delete',
      path: '/v1/account/keys/{key_id}',
      summary:
        'Revoke an API key, on every node at once (idempotent), closing the solver sockets opened ' +
        'with it; the last live key, or the last unrestricted one, only with allow_last=true; a ' +
        'restricted key may revoke only itself',
      tag: 'account',
      auth: 'bearer',
      params: KeyIdParams,
      query: RevokeApiKeyQuery,
      response: responses.ApiKeyInfo,
      errors: ['restricted_api_key', 'api_key_not_found', 'last_api_key'],
      handler: [
        // After the params: whether the key revokes itself is read from a valid key_id.
        requireKeyManager({ mayRevokeItself: true }),
        async (req, res) => {
          const query = parseOrThrow(RevokeApiKeyQuery, req.query, ['query']);
          const keyId = req.params.key_id as string;
          const outcome = await deps.accounts.revokeApiKey(accountOf(res).account_id, keyId, {
            allowLast: query.allow_last === 'true',
          });
          switch (outcome.kind) {
            case 'revoked':
              res.json(outcome.key);
              return;
            case 'not_found':
              throw new ApiError('api_key_not_found', `No API key "${keyId}" on this account.`);
            case 'last_key':
              throw new ApiError(
                'last_api_key',
                outcome.lastUnrestricted
                  ? `Key ${keyId} is this account's only live unrestricted key: without it no key could create, ` +
                      `change or revoke keys. Create another unrestricted key first (POST /v1/account/keys), or ` +
                      `repeat with ?allow_last=true.`
                  : `Key ${keyId} is this account's only live key: revoking it would leave no way to use the ` +
                      `account. Create another key first (POST /v1/account/keys), or repeat with ` +
                      `?allow_last=true.`,
                { key_id: keyId },
              );
          }
        },
      ],
    }),
  );

  // The replaced secret is the account's to have kept; only its end is shown.
  const shownSecret = ({ secret, rotated_at, previous_secret_expires_at }: WebhookSecret) => ({
    secret,
    rotated_at,
    previous_secret_expires_at,
  });

  async function getAccountWebhookSecret(_req: Request, res: Response) {
    res.json(shownSecret(await deps.accounts.webhookSecret(accountOf(res).account_id)));
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/account/webhook-secret',
      summary: "The secret that signs the account's webhook deliveries (made on first use)",
      tag: 'account',
      auth: 'bearer',
      response: responses.WebhookSecret,
      handler: getAccountWebhookSecret,
    }),
  );

  async function postAccountWebhookSecretRotate(_req: Request, res: Response) {
    res.json(shownSecret(await deps.accounts.rotateWebhookSecret(accountOf(res).account_id)));
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/account/webhook-secret/rotate',
      summary:
        'Replace the webhook secret; deliveries from now on are signed with the new one, and for 24 ' +
        'h with the replaced one too (two signatures)',
      tag: 'account',
      auth: 'bearer',
      response: responses.WebhookSecret,
      handler: postAccountWebhookSecretRotate,
    }),
  );

  const noWebhook = () =>
    new ApiError('webhook_not_found', 'This account has no default webhook; set one with PUT /v1/account/webhook.');

  async function putAccountWebhook(req: Request, res: Response) {
    const body = req.body as AccountWebhookRequest;
    await assertAllowedTarget(deps.domainPolicy, body.url, ['body', 'url']);
    res.json(
      await deps.accounts.setAccountWebhook(accountOf(res).account_id, {
        url: body.url,
        events: body.events ?? WEBHOOK_EVENTS,
      }),
    );
  }

  routes.push(
    route({
      method: 'put',
      path: '/v1/account/webhook',
      summary:
        "Set the account's default webhook: every task created from now on (POST /v1/tasks, the " +
        'convenience endpoints, scrape and search compat, chat) carries it unless its request names ' +
        'its own',
      tag: 'account',
      auth: 'bearer',
      body: AccountWebhookBody,
      response: responses.AccountWebhook,
      errors: ['domain_blocked'],
      handler: putAccountWebhook,
    }),
  );

  async function getAccountWebhook(_req: Request, res: Response) {
    const webhook = await deps.accounts.accountWebhook(accountOf(res).account_id);
    if (!webhook) throw noWebhook();
    res.json(webhook);
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/account/webhook',
      summary: "The account's default webhook",
      tag: 'account',
      auth: 'bearer',
      response: responses.AccountWebhook,
      errors: ['webhook_not_found'],
      handler: getAccountWebhook,
    }),
  );

  async function deleteAccountWebhook(_req: Request, res: Response) {
    const removed = await deps.accounts.deleteAccountWebhook(accountOf(res).account_id);
    if (!removed) throw noWebhook();
    res.json(removed);
  }

  routes.push(
    route({
      method: 'delete',
      path: '/v1/account/webhook',
      summary: "Remove the account's default webhook (tasks created before keep theirs)",
      tag: 'account',
      auth: 'bearer',
      response: responses.AccountWebhook,
      errors: ['webhook_not_found'],
      handler: deleteAccountWebhook,
    }),
  );

  async function patchAccountSettings(req: Request, res: Response) {
    const updated = await deps.accounts.updateSettings(accountOf(res).account_id, req.body);
    res.json({ prompt_safety_scan: updated.prompt_safety_scan });
  }

  routes.push(
    route({
      method: 'patch',
      path: '/v1/account/settings',
      summary: 'Change account settings',
      tag: 'account',
      auth: 'bearer',
      body: AccountSettingsBody,
      response: AccountSettingsBody,
      handler: patchAccountSettings,
    }),
  );

  return routes;
}
