import type { Request, Response } from 'express';
import crypto from 'node:crypto';
import { ApiError } from '../../errors';
import { decimalText, StringMap } from '../../schemas/common';
import { ClearQuarantineBody, DepositBody, SetVerifierBody, SolverIdParams } from '../../schemas/requests';
import type { AppDeps } from '../deps';
import { route, type Route } from '../route';
import { parseOrThrow } from '../validation';
import { idempotencyKeyReused } from '../web-tasks';
import { AdminTasksQuery } from '../../schemas/queries';
import { SolverTrust } from '../../schemas/responses';
import { TaskIdParams } from '../../schemas/requests';
import { taskListFilter, taskListPage } from '../pagination';
import type { MarketEvent } from '../../services/market-events';

export function adminRoutes(deps: AppDeps): Route[] {
  const routes: Route[] = [];

  async function postAdminDeposit(req: Request, res: Response) {
    const { account_id: accountId, amount_points: amount } = req.body as {
      account_id: string;
      amount_points: number | string;
    };
    if (!(await deps.accounts.findAccount(accountId))) {
      throw new ApiError('account_not_found', `No account "${accountId}".`);
    }
    // Admin tooling retries: the same Idempotency-Key deposits once.
    const idempotencyKey = req.header('idempotency-key');
    const key = idempotencyKey ? `deposit:${accountId}:${idempotencyKey}` : `deposit:${crypto.randomUUID()}`;
    const amountText = decimalText(amount);
    const result = await deps.ledger.deposit({ accountId, amount: amountText, idempotencyKey: key });
    // The key is the account's: another amount under it is another request.
    if (!result.applied && result.depositedBefore !== amountText) throw idempotencyKeyReused();
    res.locals.log.info({ account_id: accountId, amount_points: amountText, applied: result.applied }, 'deposit');
    const balance = await deps.ledger.getBalance(accountId);
    res.json({ account_id: accountId, deposited_points: amountText, applied: String(result.applied), ...balance });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/admin/deposit',
      summary: 'Deposit points',
      tag: 'admin',
      auth: 'admin',
      body: DepositBody,
      response: StringMap,
      headers: {
        'Idempotency-Key':
          'A deposit sent again with the same key, account and amount applies once; the same key and ' +
          "account with another amount is 422 idempotency_key_reused (a key is the account's: for " +
          'another account it is another deposit)',
      },
      errors: ['account_not_found', 'idempotency_key_reused'],
      handler: postAdminDeposit,
    }),
  );

  async function getAdminStatus(_req: Request, res: Response) {
    const [database, temporal] = await Promise.all([deps.status.database(), deps.status.temporal()]);
    const [counts, queues, platform] =
      database === 'ok'
        ? await Promise.all([deps.status.statusCounts(), deps.status.queueStatus(), deps.status.checkFunding()])
        : [{}, {}, null];
    res.json({
      status: database === 'ok' && temporal === 'ok' ? 'ok' : 'degraded',
      node_id: deps.nodeId,
      database,
      temporal,
      temporal_namespace: deps.config.temporalNamespace,
      counts,
      queues,
      // Whether the platform account can pay the checks that take new solvers off probation (docs/trust.md, "Who
      // pays the checks").
      platform,
    });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/admin/status',
      summary:
        'Database and Temporal reachability, counts, queues, and whether the platform account can ' +
        'pay the checks that take new solvers off probation (`platform`)',
      tag: 'admin',
      auth: 'admin',
      handler: getAdminStatus,
    }),
  );

  // Trust (docs/trust.md): quarantined solvers with their evidence, one solver's record, and clearing.
  async function getAdminQuarantines(_req: Request, res: Response) {
    res.json({ quarantines: await deps.trust.listQuarantines() });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/admin/quarantines',
      summary: 'Solvers in quarantine, with the evidence and what is held of their earnings ' + '(docs/trust.md)',
      tag: 'admin',
      auth: 'admin',
      handler: getAdminQuarantines,
    }),
  );

  async function getAdminSolverTrust(req: Request, res: Response) {
    const solverId = String(req.params.solver_id);
    if (!(await deps.accounts.findAccount(solverId)))
      throw new ApiError('account_not_found', `No account "${solverId}".`);
    const [{ quarantines, reputation, held }, disagreements, usageInflations, verifierMarkedAt, audits] =
      await Promise.all([
        deps.trust.standing(solverId),
        deps.trust.disagreementsOf(solverId),
        deps.trust.usageInflationsOf(solverId),
        deps.trust.verifierSince(solverId),
        deps.trust.chatAuditsOf(solverId),
      ]);
    res.json({
      solver_id: solverId,
      quarantined: quarantines.some((q) => q.cleared_at === null),
      verifier: verifierMarkedAt !== null,
      ...held,
      reputation,
      quarantines,
      disagreements,
      usage_inflations: usageInflations,
      ...audits,
    });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/admin/solvers/{solver_id}/trust',
      summary:
        "One solver's reputation per task type (with its verified passes and failures), whether it " +
        'is a verifier, quarantines, held earnings, redundant-run disagreements and verifications ' +
        'that proved it wrong, and inflated chat usage reports (`usage_inflations`), with their ' +
        'evidence, and its chat audits per model with the sequential test on them (`chat_audits`, ' +
        '`chat_audit_test`)',
      tag: 'admin',
      auth: 'admin',
      params: SolverIdParams,
      response: SolverTrust,
      errors: ['account_not_found'],
      handler: getAdminSolverTrust,
    }),
  );

  async function postAdminSolverVerifier(req: Request, res: Response) {
    const solverId = String(req.params.solver_id);
    if (!(await deps.accounts.findAccount(solverId)))
      throw new ApiError('account_not_found', `No account "${solverId}".`);
    const verifier = await deps.trust.setVerifier(solverId, (req.body as { verifier: boolean }).verifier);
    res.locals.log.info(
      { solver_id: solverId, verifier },
      verifier ? 'solver marked verifier' : 'solver unmarked verifier',
    );
    res.json({ solver_id: solverId, verifier });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/admin/solvers/{solver_id}/verifier',
      summary:
        'Mark a solver a verifier, or unmark it: sampled client tasks are re-run by a verifier ' +
        'online for their type, whose disagreement proves the result wrong and refunds it ' +
        '(docs/trust.md, "Verified client tasks")',
      tag: 'admin',
      auth: 'admin',
      params: SolverIdParams,
      body: SetVerifierBody,
      errors: ['account_not_found'],
      handler: postAdminSolverVerifier,
    }),
  );

  async function postAdminSolverQuarantineClear(req: Request, res: Response) {
    const solverId = String(req.params.solver_id);
    if (!(await deps.accounts.findAccount(solverId)))
      throw new ApiError('account_not_found', `No account "${solverId}".`);
    const cleared = await deps.trust.clearQuarantine(solverId, (req.body as { note?: string | null }).note ?? null);
    if (!cleared) throw new ApiError('quarantine_not_found', `Solver "${solverId}" is not quarantined.`);
    res.locals.log.info({ solver_id: solverId, released_points: cleared.released_points }, 'quarantine cleared');
    res.json({ solver_id: solverId, ...cleared });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/admin/solvers/{solver_id}/quarantine/clear',
      summary: "Clear a solver's quarantine and release its held earnings",
      tag: 'admin',
      auth: 'admin',
      params: SolverIdParams,
      body: ClearQuarantineBody,
      errors: ['account_not_found', 'quarantine_not_found'],
      handler: postAdminSolverQuarantineClear,
    }),
  );

  async function postAdminSolverQuarantineConfirm(req: Request, res: Response) {
    const solverId = String(req.params.solver_id);
    if (!(await deps.accounts.findAccount(solverId)))
      throw new ApiError('account_not_found', `No account "${solverId}".`);
    const confirmed = await deps.trust.confirmQuarantine(solverId, (req.body as { note?: string | null }).note ?? null);
    if (!confirmed) throw new ApiError('quarantine_not_found', `Solver "${solverId}" is not quarantined.`);
    const outcome = confirmed;
    res.locals.log.info(
      { solver_id: solverId, refunded_tasks: outcome.refunded_tasks, refunded_points: outcome.refunded_points },
      'quarantine confirmed',
    );
    res.json({ solver_id: solverId, ...outcome });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/admin/solvers/{solver_id}/quarantine/confirm',
      summary:
        "Confirm a solver's quarantine: it stays quarantined, and its unvested earnings are " +
        'forfeited to refund the clients of those tasks (docs/trust.md, "Escrow and refunds")',
      tag: 'admin',
      auth: 'admin',
      params: SolverIdParams,
      body: ClearQuarantineBody,
      errors: ['account_not_found', 'quarantine_not_found'],
      handler: postAdminSolverQuarantineConfirm,
    }),
  );

  // The console's reads (docs/console.md): any account's tasks, one task in full, the solvers online, the live feed.
  async function getAdminTasks(req: Request, res: Response) {
    const query = parseOrThrow(AdminTasksQuery, req.query, ['query']);
    const page = await deps.taskViews.findTasks({
      ...taskListFilter(query),
      taskId: query.task_id,
      accountId: query.account_id,
    });
    res.json(taskListPage(page));
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/admin/tasks',
      summary:
        "Any account's tasks, newest first, found by id, account, type, status and time, paged by " +
        'cursor (records without result, with account_id)',
      tag: 'admin',
      auth: 'admin',
      query: AdminTasksQuery,
      handler: getAdminTasks,
    }),
  );

  async function getAdminTask(req: Request, res: Response) {
    const taskId = String(req.params.task_id);
    const [record, row, attempts, ledger] = await Promise.all([
      deps.tasks.read(taskId),
      deps.taskViews.getTaskRow(taskId),
      deps.taskViews.taskAttempts(taskId),
      deps.ledger.taskLedger(taskId),
    ]);
    if (!record || !row) throw new ApiError('task_not_found', `No task "${taskId}".`);
    const ui = deps.config.temporalUiUrl;
    const workflowUrl = ui
      ? `${ui}/namespaces/${encodeURIComponent(deps.config.temporalNamespace)}/workflows/${encodeURIComponent(record.workflow_id)}`
      : null;
    res.json({ ...record, account_id: row.account_id, attempts, ledger, workflow_url: workflowUrl });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/admin/tasks/{task_id}',
      summary:
        'One task in full: its record and result, account_id, every attempt (node, price, outcome, ' +
        'error, times), every ledger entry it wrote on any account, and workflow_url (its workflow ' +
        'in the Temporal UI, null when TEMPORAL_UI_URL is unset)',
      tag: 'admin',
      auth: 'admin',
      params: TaskIdParams,
      errors: ['task_not_found'],
      handler: getAdminTask,
    }),
  );

  async function getAdminSolvers(_req: Request, res: Response) {
    const solvers = await deps.solvers.onlineSolvers();
    const withReputation = await Promise.all(
      solvers.map(async (solver) => ({ ...solver, reputation: await deps.trust.reputationOf(solver.solver_id) })),
    );
    res.json({ data: withReputation });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/admin/solvers',
      summary:
        'Solvers online: node, capabilities with price, slots and slots taken, and reputation per ' + 'task type',
      tag: 'admin',
      auth: 'admin',
      handler: getAdminSolvers,
    }),
  );

  async function getAdminEvents(req: Request, res: Response) {
    // Without Accept: text/event-stream, the same samples once, as JSON, and a fresh one (curl, fuzzers).
    if (req.accepts(['application/json', 'text/event-stream']) !== 'text/event-stream') {
      res.json({
        samples: [...deps.market.history(), { at: new Date().toISOString(), queues: await deps.status.queueStatus() }],
      });
      return;
    }
    res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache, no-transform',
      'X-Accel-Buffering': 'no',
      Connection: 'keep-alive',
    });
    res.flushHeaders();
    const send = ({ event, data }: MarketEvent) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), deps.config.sseKeepAliveMs);
    const stop = deps.market.listen(send, () => res.end());
    req.on('close', () => {
      clearInterval(keepAlive);
      stop();
    });
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/admin/events',
      summary:
        "Server-sent events for the console (docs/console.md): `history` (this node's queue " +
        'snapshots of the last hour) first, then `status` (a queue snapshot every 5 s and shortly ' +
        'after tasks end) and `task_finished` ({task_id, status}, as each task ends); without ' +
        'Accept: text/event-stream, the samples once as JSON',
      tag: 'admin',
      auth: 'admin',
      success: 'events',
      handler: getAdminEvents,
    }),
  );

  return routes;
}
