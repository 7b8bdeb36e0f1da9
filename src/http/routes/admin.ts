import crypto from 'node:crypto';
import { Router } from 'express';
import { findAccount } from '../../db/accounts';
import { deposit, getBalance } from '../../db/ledger';
import { statusCounts } from '../../db/status';
import { sql } from 'slonik';
import { ApiError } from '../../errors';
import { decimalText } from '../../schemas/common';
import { DepositBody } from '../../schemas/requests';
import { requireAdmin } from '../auth';
import type { AppDeps } from '../deps';
import { validateBody } from '../validation';

export function adminRoutes(deps: AppDeps): Router {
  const router = Router();
  const admin = requireAdmin(deps.config.adminApiKey);

  router.post('/v1/admin/deposit', admin, validateBody(DepositBody), async (req, res) => {
    const { account_id: accountId, amount_points: amount } = req.body as { account_id: string; amount_points: number | string };
    if (!(await findAccount(deps.db, accountId))) {
      throw new ApiError('account_not_found', `No account "${accountId}".`);
    }
    // Admin tooling retries: the same Idempotency-Key deposits once.
    const idempotencyKey = req.header('idempotency-key');
    const key = idempotencyKey ? `deposit:${accountId}:${idempotencyKey}` : `deposit:${crypto.randomUUID()}`;
    const amountText = decimalText(amount);
    const result = await deposit(deps.db, { accountId, amount: amountText, idempotencyKey: key });
    res.locals.log.info({ account_id: accountId, amount_points: amountText, applied: result.applied }, 'deposit');
    const balance = await getBalance(deps.db, accountId);
    res.json({ account_id: accountId, deposited_points: amountText, applied: String(result.applied), ...balance });
  });

  router.get('/v1/admin/status', admin, async (_req, res) => {
    const [database, temporal] = await Promise.all([
      deps.db
        .oneFirst(sql.unsafe`SELECT 1`)
        .then(() => 'ok')
        .catch((error: Error) => `error: ${error.message}`),
      deps.temporal.workflowService
        .getSystemInfo({})
        .then(() => 'ok')
        .catch((error: Error) => `error: ${error.message}`),
    ]);
    const counts = database === 'ok' ? await statusCounts(deps.db) : {};
    res.json({
      status: database === 'ok' && temporal === 'ok' ? 'ok' : 'degraded',
      node_id: deps.nodeId,
      database,
      temporal,
      temporal_namespace: deps.config.temporalNamespace,
      counts,
    });
  });

  return router;
}
