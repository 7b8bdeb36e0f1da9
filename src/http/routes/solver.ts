import { Router } from 'express';
import { getBalance } from '../../db/ledger';
import { listCapabilities, replaceCapabilities, solverStats } from '../../db/solvers';
import { recentAttemptsOf } from '../../db/market-view';
import { CHAT_TASK_TYPE } from '../../schemas/domain';
import { SolverCapabilitiesBody, type SolverCapabilityInput } from '../../schemas/requests';
import { accountOf, requireAccount } from '../auth';
import type { AppDeps } from '../deps';
import { heldEarnings, quarantinesOf, reputationOf } from '../../trust/quarantines';
import { RequestValidationError, validateBody, type ValidationDetail } from '../validation';

/** Rules a capability list must follow beyond its schema: strong chat only for allowlisted models, no duplicates. */
function checkCapabilities(capabilities: SolverCapabilityInput[], strongModels: string[]): ValidationDetail[] {
  const problems: ValidationDetail[] = [];
  const seen = new Set<string>();
  capabilities.forEach((capability, index) => {
    if (capability.tier === 'strong' && capability.task_type === CHAT_TASK_TYPE && !strongModels.includes(capability.model_name)) {
      problems.push({
        type: 'value_error',
        loc: ['body', index, 'tier'],
        msg: `Value error, model "${capability.model_name}" is not on the strong-tier allowlist; it cannot claim tier "strong"`,
        input: capability.tier,
        ctx: { allowlist: strongModels },
      });
    }
    const key = `${capability.task_type}\u0000${capability.model_name}`;
    if (seen.has(key)) {
      problems.push({ type: 'value_error', loc: ['body', index], msg: `Value error, duplicate capability for task_type "${capability.task_type}" and model_name "${capability.model_name}"`, input: capability });
    }
    seen.add(key);
  });
  return problems;
}

export function solverRoutes(deps: AppDeps): Router {
  const router = Router();
  const auth = requireAccount();

  router.post('/v1/solver/capabilities', auth, validateBody(SolverCapabilitiesBody), async (req, res) => {
    const capabilities = req.body as SolverCapabilityInput[];
    const problems = checkCapabilities(capabilities, deps.strongModels());
    if (problems.length) throw new RequestValidationError(problems);
    const solverId = accountOf(res).account_id;
    const stored = await replaceCapabilities(deps.db, solverId, capabilities);
    deps.handoffs.deliver(stored.handoffs);
    res.json({ solver_id: solverId, capabilities: stored.capabilities.map(({ active_attempts: _active, ...capability }) => capability) });
  });

  router.get('/v1/solver/stats', auth, async (_req, res) => {
    const solverId = accountOf(res).account_id;
    const [stats, capabilities, balance, reputation, quarantines, held] = await Promise.all([
      solverStats(deps.db, solverId),
      listCapabilities(deps.db, solverId),
      getBalance(deps.db, solverId),
      reputationOf(deps.db, solverId),
      quarantinesOf(deps.db, solverId),
      heldEarnings(deps.db, solverId),
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
      trust: { quarantine: quarantines.find((q) => q.cleared_at === null) ?? null, ...held, reputation },
    });
  });

  router.get('/v1/solver/attempts', auth, async (_req, res) => {
    res.json({ data: await recentAttemptsOf(deps.db, accountOf(res).account_id) });
  });

  return router;
}
