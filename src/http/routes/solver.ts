import type { Request, Response } from 'express';
import { CHAT_TASK_TYPE } from '../../schemas/domain';
import { SolverCapabilitiesBody, type SolverCapabilityInput } from '../../schemas/requests';
import type { Reputation } from '../../db/quarantines';
import { accountOf } from '../auth';
import * as responses from '../../schemas/responses';
import type { AppDeps } from '../deps';
import { route, type Route } from '../route';
import { RequestValidationError, type ValidationDetail } from '../validation';

/** Rules a capability list must follow beyond its schema: strong chat only for allowlisted models, no duplicates. */
function checkCapabilities(capabilities: SolverCapabilityInput[], strongModels: string[]): ValidationDetail[] {
  const problems: ValidationDetail[] = [];
  const seen = new Set<string>();
  capabilities.forEach((capability, index) => {
    if (
      capability.tier === 'strong' &&
      capability.task_type === CHAT_TASK_TYPE &&
      !strongModels.includes(capability.model_name)
    ) {
      problems.push({
        type: 'value_error',
        loc: ['body', index, 'tier'],
        msg:
          `Value error, model "${capability.model_name}" is not on the strong-tier allowlist; it ` +
          `cannot claim tier "strong"`,
        input: capability.tier,
        ctx: { allowlist: strongModels },
      });
    }
    const key = `${capability.task_type}\u0000${capability.model_name}`;
    if (seen.has(key)) {
      problems.push({
        type: 'value_error',
        loc: ['body', index],
        msg: `Value error, duplicate capability for task_type "${capability.task_type}" and model_name "${capability.model_name}"`,
        input: capability,
      });
    }
    seen.add(key);
  });
  return problems;
}

/**
 * A solver's own view of its reputation: its score and the counts matching reads, never how many of its
 * tasks were checks (canaries, redundant and verification runs). Those counts change just after the
 * task that was one, so reading them after each task would label which tasks were checks and let a
 * solver answer checks honestly and clients otherwise. Operators see them (admin trust view).
 */
function ownReputation(reputation: Reputation[]) {
  return reputation.map(({ task_type, score, successes, failures, latency_ms, client_work, on_probation }) => ({
    task_type,
    score,
    successes,
    failures,
    latency_ms,
    client_work,
    on_probation,
  }));
}

export function solverRoutes(deps: AppDeps): Route[] {
  const routes: Route[] = [];

  async function postSolverCapabilities(req: Request, res: Response) {
    const capabilities = req.body as SolverCapabilityInput[];
    const problems = checkCapabilities(capabilities, deps.strongModels());
    if (problems.length) throw new RequestValidationError(problems);
    const solverId = accountOf(res).account_id;
    const stored = await deps.solvers.replaceCapabilities(solverId, capabilities);
    res.json({
      solver_id: solverId,
      capabilities: stored.map(({ active_attempts: _active, ...capability }) => capability),
    });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/solver/capabilities',
      summary: 'Register or replace solver capabilities',
      tag: 'solver',
      auth: 'bearer',
      body: SolverCapabilitiesBody,
      handler: postSolverCapabilities,
    }),
  );

  async function getSolverStats(_req: Request, res: Response) {
    const solverId = accountOf(res).account_id;
    const [stats, capabilities, balance, { quarantines, reputation, held }] = await Promise.all([
      deps.solvers.solverStats(solverId),
      deps.solvers.listCapabilities(solverId),
      deps.ledger.getBalance(solverId),
      deps.trust.standing(solverId),
    ]);
    const active = capabilities.reduce((sum, capability) => sum + capability.active_attempts, 0);
    // The record counts attempts as they end; the running ones count here too.
    const attempts = (stats?.attempts ?? 0) + active;
    const completed = stats?.completed ?? 0;
    res.json({
      solver_id: solverId,
      connected: stats?.connected ?? false,
      draining: stats?.draining ?? false,
      active_attempts: active,
      attempts,
      completed,
      failed: stats?.failed ?? 0,
      success_rate: attempts ? completed / attempts : null,
      avg_latency_ms: completed ? Math.round((stats?.total_latency_ms ?? 0) / completed) : null,
      lifetime_earned_points: balance?.lifetime_earned_points ?? '0',
      capabilities,
      // Its reputation and any quarantine (docs/trust.md): what matching sees of it.
      trust: {
        quarantine: quarantines.find((q) => q.cleared_at === null) ?? null,
        ...held,
        reputation: ownReputation(reputation),
      },
    });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/solver/stats',
      summary: 'Solver statistics, with its reputation per task type and any quarantine (docs/trust.md)',
      tag: 'solver',
      auth: 'bearer',
      handler: getSolverStats,
    }),
  );

  async function getSolverEarnings(_req: Request, res: Response) {
    const solverId = accountOf(res).account_id;
    res.json({ solver_id: solverId, ...(await deps.accounts.earningsOf(solverId)) });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/solver/earnings',
      summary:
        "The calling solver's pay not vested yet (part of its held_points), whether a quarantine " +
        'freezes it, and when the oldest vests (docs/trust.md, "Escrow and refunds")',
      tag: 'solver',
      auth: 'bearer',
      response: responses.SolverEarnings,
      handler: getSolverEarnings,
    }),
  );

  async function getSolverAttempts(_req: Request, res: Response) {
    res.json({ data: await deps.solvers.recentAttemptsOf(accountOf(res).account_id) });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/solver/attempts',
      summary:
        "The calling solver's latest attempts (at most 50, of the last 7 days), newest first: " +
        'task, type, price, outcome and the error that ended any failed one',
      tag: 'solver',
      auth: 'bearer',
      response: responses.SolverAttempts,
      handler: getSolverAttempts,
    }),
  );

  // Declared for the document: the upgrade is answered on the socket, outside the app (src/http/ws-server.ts).
  routes.push(
    route({
      method: 'get',
      path: '/v1/solver/connect',
      summary:
        'WebSocket upgrade for solver protocol v1 (see docs/solver-protocol.md); a request without ' +
        'the upgrade is 404',
      tag: 'solver',
      auth: 'bearer',
      errors: ['not_found'],
      success: 'websocket',
    }),
  );
  return routes;
}
