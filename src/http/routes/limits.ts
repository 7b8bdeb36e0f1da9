import { Router } from 'express';
import { findAccount } from '../../db/accounts';
import { resetRateLimit, simulateRateLimit } from '../../db/rate-limits';
import { ApiError } from '../../errors';
import { DomainPolicyFileError } from '../../policy/loader';
import { AccountIdBody, SimulateRateLimitBody } from '../../schemas/requests';
import { requireAdmin } from '../auth';
import type { AppDeps } from '../deps';
import { validateBody } from '../validation';

/** Admin control of the rate limit and the domain policy. */
export function limitRoutes(deps: AppDeps): Router {
  const router = Router();
  const admin = requireAdmin(deps.config.adminApiKey);

  const existingAccount = async (accountId: string) => {
    if (!(await findAccount(deps.db, accountId))) throw new ApiError('account_not_found', `No account "${accountId}".`);
  };

  router.post('/v1/admin/simulate-rate-limit', admin, validateBody(SimulateRateLimitBody), async (req, res) => {
    const { account_id: accountId, trigger_after_n_requests: after } = req.body as { account_id: string; trigger_after_n_requests: number };
    await existingAccount(accountId);
    await simulateRateLimit(deps.db, accountId, after);
    res.locals.log.info({ account_id: accountId, trigger_after_n_requests: after }, 'rate limit simulation armed');
    res.json({
      account_id: accountId,
      trigger_after_n_requests: after,
      message: `The next ${after} request(s) are admitted; every later one gets 429 until POST /v1/admin/reset-rate-limit.`,
    });
  });

  router.post('/v1/admin/reset-rate-limit', admin, validateBody(AccountIdBody), async (req, res) => {
    const { account_id: accountId } = req.body as { account_id: string };
    await existingAccount(accountId);
    await resetRateLimit(deps.db, accountId);
    res.json({ account_id: accountId, reset: true, limit_per_minute: deps.config.rateLimitPerMinute });
  });

  router.post('/v1/admin/domain-policy/reload', admin, async (_req, res) => {
    let policy;
    try {
      policy = await deps.domainPolicy.reloadEverywhere(deps.bus);
    } catch (error) {
      if (error instanceof DomainPolicyFileError) throw new ApiError('invalid_domain_policy', `${error.message}. The previous policy stays in force.`);
      throw error;
    }
    res.json({
      reloaded: true,
      node_id: deps.nodeId,
      file: deps.config.domainPolicyFile,
      default: policy.default,
      allow: policy.allow,
      deny: policy.deny,
      allow_private_networks: policy.allow_private_networks || deps.config.allowPrivateNetworks,
    });
  });

  return router;
}
