import { Router } from 'express';
import { createAccount, updateSettings } from '../../db/accounts';
import { getBalance } from '../../db/ledger';
import { AccountSettingsBody } from '../../schemas/requests';
import { accountOf, requireAccount } from '../auth';
import type { AppDeps } from '../deps';
import { validateBody } from '../validation';

export function accountRoutes(deps: AppDeps): Router {
  const router = Router();
  const auth = requireAccount();

  router.post('/v1/register', async (_req, res) => {
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
    const balance = await getBalance(deps.db, account.account_id);
    res.json({ account_id: account.account_id, ...balance });
  });

  router.patch('/v1/account/settings', auth, validateBody(AccountSettingsBody), async (req, res) => {
    const updated = await updateSettings(deps.db, accountOf(res).account_id, req.body);
    res.json({ prompt_safety_scan: updated.prompt_safety_scan });
  });

  return router;
}
