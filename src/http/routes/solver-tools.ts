import type { Request, Response } from 'express';
import { billingTypesOf, CAPABILITY_TASK_TYPES, CHAT_TASK_TYPE, SOLVER_PROTOCOL_VERSION } from '../../schemas/domain';
import { solverJsonSchemas } from '../../schemas/json-schema';
import type { z } from '../../schemas/zod';
import { SolverMarket } from '../../schemas/solver-market';
import { MAX_FRAME_BYTES } from '../ws-server';
import { checksSent, isCanaryTaskType } from '../../db/reputation';
import type { AppDeps } from '../deps';
import { route, type Route } from '../route';

/** What solver authors read before and while they run: the market's terms and the protocol's JSON Schema. */
export function solverToolRoutes(deps: AppDeps): Route[] {
  const routes: Route[] = [];
  const { config } = deps;

  function getSolverMarket(_req: Request, res: Response) {
    const market: z.infer<typeof SolverMarket> = {
      protocol_version: SOLVER_PROTOCOL_VERSION,
      server_time: new Date().toISOString(),
      platform_fee_percent: config.platformFeePercent,
      strong_models: deps.strongModels(),
      task_types: Object.fromEntries(
        CAPABILITY_TASK_TYPES.map((type) => [
          type,
          {
            default_max_price_points:
              type === CHAT_TASK_TYPE ? config.defaultChatPricePoints : config.defaultWebTaskPricePoints,
            strong_tier_only: type === CHAT_TASK_TYPE,
            check_price_ceiling_points:
              checksSent(config.trust) && isCanaryTaskType(config.trust, type)
                ? config.trust.checkPriceCeilingPoints
                : null,
            billing_types: [...billingTypesOf(type)],
          },
        ]),
      ) as z.infer<typeof SolverMarket>['task_types'],
      accept_timeout_ms: config.acceptTimeoutMs,
      attempt_timeout_seconds: config.attemptTimeoutSeconds,
      heartbeat_interval_ms: config.heartbeatIntervalMs,
      max_task_attempts: config.maxTaskAttempts,
      default_task_timeout_seconds: config.defaultTaskTimeoutSeconds,
      chat_timeout_seconds: config.chatTimeoutSeconds,
      max_frame_bytes: MAX_FRAME_BYTES,
    };
    res.json(market);
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/solver/market',
      summary:
        "The market a solver works in: strong-tier allowlist, platform fee, clients' default " +
        'maximum prices, protocol version, timeouts, server time',
      tag: 'solver',
      auth: 'bearer',
      response: SolverMarket,
      handler: getSolverMarket,
    }),
  );

  function getSolverSchemas(_req: Request, res: Response) {
    res.json(solverJsonSchemas());
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/solver/schemas',
      summary:
        'JSON Schema (draft 2020-12) of every solver protocol frame and result type ' + '(docs/solver-schemas.json)',
      tag: 'solver',
      auth: 'bearer',
      handler: getSolverSchemas,
    }),
  );

  return routes;
}
