import { Router } from 'express';
import { createAccount, createApiKey, listApiKeys, revokeApiKey, updateApiKey, updateSettings, type SpendLimit } from '../../db/accounts';
import { decimalText } from '../../schemas/common';
import { ApiError } from '../../errors';
import { getBalance, ledgerHistory, ledgerSummary } from '../../db/ledger';
import { earningsOf } from '../../trust/escrow';
import { accountWebhook, deleteAccountWebhook, rotateWebhookSecret, setAccountWebhook, WEBHOOK_EVENTS, webhookSecret, type WebhookSecret } from '../../db/webhooks';
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
import { accountOf, requireAccount, requireKeyManager } from '../auth';
import type { AppDeps } from '../deps';
import { addressLimitsOf } from '../rate-limit';
import { decodeCursor, encodeCursor } from '../pagination';
import { parseOrThrow, validateBody, validateParams } from '../validation';
import { assertAllowedTarget } from '../target-policy';

/** A spend limit as stored (points as exact decimal text); null removes one, undefined leaves it. */
const spendLimitOf = (limit: SpendLimitRequest | null | undefined): SpendLimit | null | undefined =>
  limit && { points: decimalText(limit.points), period: limit.period };

export function accountRoutes(deps: AppDeps): Router {
  const router = Router();
  const auth = requireAccount();
  const keyManager = requireKeyManager();

  router.post('/v1/register', async (req, res) => {
    await addressLimitsOf(req).admit(req, 'register');
    const { account, apiKey } = await createAccount(deps.db);
    res.locals.log.info({ account_id: account.account_id }, 'account registered');
    res.status(200).json({
      account_id: account.account_id,
      api_key: apiKey,
      created_at: account.created_at,
      note: 'Store this api_key now: it is shown only once.',
    });
  });

  router.get('/v1/profile', auth, async (_req, res) => {
    const account = accountOf(res);
    const balance = await getBalance(deps.db, account.account_id);
    res.json({
      account_id: account.account_id,
      created_at: account.created_at,
      settings: { prompt_safety_scan: account.prompt_safety_scan },
      balance,
    });
  });

  router.get('/v1/balance', auth, async (_req, res) => {
    const account = accountOf(res);
    const [balance, earnings] = await Promise.all([getBalance(deps.db, account.account_id), earningsOf(deps.db, account.account_id)]);
    res.json({ account_id: account.account_id, ...balance, earnings });
  });

  router.get('/v1/account/ledger', auth, async (req, res) => {
    const query = parseOrThrow(LedgerHistoryQuery, req.query, ['query']);
    const after = decodeCursor(query.cursor, [(entryId) => /^\d{1,18}$/.test(entryId)]);
    const page = await ledgerHistory(deps.db, accountOf(res).account_id, {
      kind: query.kind,
      taskId: query.task_id,
      createdAfter: query.created_after,
      createdBefore: query.created_before,
      beforeEntryId: after?.[0],
      limit: query.limit ?? PAGE_LIMIT_DEFAULT,
    });
    const last = page.entries[page.entries.length - 1];
    res.json({ data: page.entries, has_more: page.hasMore, next_cursor: page.hasMore && last ? encodeCursor([last.entry_id]) : null });
  });

  router.get('/v1/account/ledger/summary', auth, async (req, res) => {
    const query = parseOrThrow(LedgerSummaryQuery, req.query, ['query']);
    res.json({ data: await ledgerSummary(deps.db, accountOf(res).account_id, { createdAfter: query.created_after, createdBefore: query.created_before }) });
  });

  router.post('/v1/account/keys', auth, keyManager, validateBody(CreateApiKeyBody), async (req, res) => {
    const body = req.body as CreateApiKeyRequest;
    const spendLimit = spendLimitOf(body.spend_limit);
    const { key, apiKey } = await createApiKey(deps.db, accountOf(res).account_id, { name: body.name, spendLimit, restricted: body.restricted ?? Boolean(spendLimit) });
    res.json({ ...key, api_key: apiKey });
  });

  router.patch('/v1/account/keys/:key_id', auth, keyManager, validateParams(KeyIdParams), validateBody(UpdateApiKeyBody), async (req, res) => {
    const body = req.body as UpdateApiKeyRequest;
    const keyId = req.params.key_id as string;
    const key = await updateApiKey(deps.db, accountOf(res).account_id, keyId, { name: body.name, spendLimit: spendLimitOf(body.spend_limit) });
    if (!key) throw new ApiError('api_key_not_found', `No API key "${keyId}" on this account.`);
    res.json(key);
  });

  router.get('/v1/account/keys', auth, keyManager, async (_req, res) => {
    res.json({ data: await listApiKeys(deps.db, accountOf(res).account_id) });
  });

  router.delete('/v1/account/keys/:key_id', auth, validateParams(KeyIdParams), requireKeyManager({ mayRevokeItself: true }), async (req, res) => {
    const query = parseOrThrow(RevokeApiKeyQuery, req.query, ['query']);
    const keyId = req.params.key_id as string;
    const outcome = await revokeApiKey(deps.db, accountOf(res).account_id, keyId, { allowLast: query.allow_last === 'true' });
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
            ? `Key ${keyId} is this account's only live unrestricted key: without it no key could create, change or revoke keys. Create another unrestricted key first (POST /v1/account/keys), or repeat with ?allow_last=true.`
            : `Key ${keyId} is this account's only live key: revoking it would leave no way to use the account. Create another key first (POST /v1/account/keys), or repeat with ?allow_last=true.`,
          { key_id: keyId },
        );
    }
  });

  // The replaced secret is the account's to have kept; only its end is shown.
  const shownSecret = ({ secret, rotated_at, previous_secret_expires_at }: WebhookSecret) => ({ secret, rotated_at, previous_secret_expires_at });

  router.get('/v1/account/webhook-secret', auth, async (_req, res) => {
    res.json(shownSecret(await webhookSecret(deps.db, accountOf(res).account_id)));
  });

  router.post('/v1/account/webhook-secret/rotate', auth, async (_req, res) => {
    res.json(shownSecret(await rotateWebhookSecret(deps.db, accountOf(res).account_id)));
  });

  const noWebhook = () => new ApiError('webhook_not_found', 'This account has no default webhook; set one with PUT /v1/account/webhook.');

  router.put('/v1/account/webhook', auth, validateBody(AccountWebhookBody), async (req, res) => {
    const body = req.body as AccountWebhookRequest;
    await assertAllowedTarget(deps.domainPolicy, body.url, ['body', 'url']);
    res.json(await setAccountWebhook(deps.db, accountOf(res).account_id, { url: body.url, events: body.events ?? WEBHOOK_EVENTS }));
  });

  router.get('/v1/account/webhook', auth, async (_req, res) => {
    const webhook = await accountWebhook(deps.db, accountOf(res).account_id);
    if (!webhook) throw noWebhook();
    res.json(webhook);
  });

  router.delete('/v1/account/webhook', auth, async (_req, res) => {
    const removed = await deleteAccountWebhook(deps.db, accountOf(res).account_id);
    if (!removed) throw noWebhook();
    res.json(removed);
  });

  router.patch('/v1/account/settings', auth, validateBody(AccountSettingsBody), async (req, res) => {
    const updated = await updateSettings(deps.db, accountOf(res).account_id, req.body);
    res.json({ prompt_safety_scan: updated.prompt_safety_scan });
  });

  return router;
}
