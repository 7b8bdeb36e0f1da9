import type { Request, Response } from 'express';
import { ApiError } from '../../errors';
import { DomainPolicyFileError } from '../../policy/loader';
import { AccountIdBody, SimulateRateLimitBody } from '../../schemas/requests';
import type { AppDeps } from '../deps';
import { route, type Route } from '../route';

/** Admin control of the rate limit and the domain policy. */
export function limitRoutes(deps: AppDeps): Route[] {
  const routes: Route[] = [];

  const existingAccount = async (accountId: string) => {
    if (!(await deps.accounts.findAccount(accountId)))
      throw new ApiError('account_not_found', `No account "${accountId}".`);
  };

  async function postAdminSimulateRateLimit(req: Request, res: Response) {
    const { account_id: accountId, trigger_after_n_requests: after } = req.body as {
      account_id: string;
      trigger_after_n_requests: number;
    };
    await existingAccount(accountId);
    await deps.limits.simulateRateLimit(accountId, after);
    res.locals.log.info({ account_id: accountId, trigger_after_n_requests: after }, 'rate limit simulation armed');
    res.json({
      account_id: accountId,
      trigger_after_n_requests: after,
      message:
        `The next ${after} request(s) are admitted; every later one gets 429 until POST ` +
        `/v1/admin/reset-rate-limit.`,
    });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/admin/simulate-rate-limit',
      summary: 'Rate-limit an account after N more requests',
      tag: 'admin',
      auth: 'admin',
      body: SimulateRateLimitBody,
      errors: ['account_not_found'],
      handler: postAdminSimulateRateLimit,
    }),
  );

  async function postAdminResetRateLimit(req: Request, res: Response) {
    const { account_id: accountId } = req.body as { account_id: string };
    await existingAccount(accountId);
    await deps.limits.resetRateLimit(accountId);
    res.json({ account_id: accountId, reset: true, limit_per_minute: deps.config.rateLimitPerMinute });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/admin/reset-rate-limit',
      summary: "Clear an account's rate-limit counter and simulation",
      tag: 'admin',
      auth: 'admin',
      body: AccountIdBody,
      errors: ['account_not_found'],
      handler: postAdminResetRateLimit,
    }),
  );

  async function postAdminDomainPolicyReload(_req: Request, res: Response) {
    let policy;
    try {
      policy = await deps.domainPolicy.reloadEverywhere();
    } catch (error) {
      if (error instanceof DomainPolicyFileError)
        throw new ApiError('invalid_domain_policy', `${error.message}. The previous policy stays in force.`);
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
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/admin/domain-policy/reload',
      summary: 'Reload the domain policy on every node',
      tag: 'admin',
      auth: 'admin',
      errors: ['invalid_domain_policy'],
      handler: postAdminDomainPolicyReload,
    }),
  );

  return routes;
}
