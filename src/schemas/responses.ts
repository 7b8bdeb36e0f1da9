import { ATTEMPT_OUTCOMES, type AttemptOutcome } from '../contract/lifecycle';
import { z } from './zod';
import { SPEND_LIMIT_PERIODS } from './domain';
import { DELIVERY_STATES, VERIFICATION_STATES } from '../contract/lifecycle';
import { HOLD_STATES } from '../contract/ledger';

/** Response schemas of the routes whose answers are documented field by field. */

const Amount = z.string().openapi({ description: 'Points, as a decimal string' });

/** What a task held and was charged; part of every task record. */
export const TaskCost = {
  held_points: Amount.nullable().openapi({
    description:
      'Points the task set aside while it ran: its maximum price, or for a chat matched at once ' +
      'its estimated price (capped at the maximum)',
  }),
  estimated_price_points: Amount.nullable().openapi({
    description:
      "The estimated price for this task of the offer that serves it (its latest attempt's): a " +
      "per_token offer's base + its rates × the prompt's counted tokens and the completion " +
      'budget; null before any attempt',
  }),
  hold_status: z
    .enum(HOLD_STATES)
    .nullable()
    .openapi({ description: 'open while it runs; settled when it was charged; released when nothing was' }),
  charged_points: Amount.openapi({
    description: 'Points charged for the task ("0" until it settles, and when it ends without a result)',
  }),
  verification: z.enum(VERIFICATION_STATES).openapi({
    description:
      'What is known of the result (docs/trust.md, "Verified client tasks", "Escrow and ' +
      "refunds\"): unchecked; verified (a verifier's or a second solver's run agreed, or a third " +
      'run upheld it); disputed (a second run disagreed and no verdict proved either side, or its ' +
      'solver was quarantined before its pay for it vested); refunded (proven wrong, or its ' +
      "solver's quarantine confirmed: what was paid for it was given back, ledger kind `refund`)",
  }),
};

export const TaskSummary = z
  .object({
    task_id: z.string(),
    task_type: z.string(),
    status: z.string(),
    payload: z.record(z.any()),
    max_price_points: Amount,
    price_points: Amount.nullable(),
    ...TaskCost,
    timeout_seconds: z.number().int(),
    solver_id: z.string().nullable(),
    error: z.record(z.any()).nullable(),
    workflow_id: z.string(),
    created_at: z.string(),
    updated_at: z.string(),
    completed_at: z.string().nullable(),
    result_expired_at: z
      .string()
      .nullable()
      .openapi({
        description:
          'When the result was removed, RESULT_RETENTION_SECONDS after the task ended (its `result` ' +
          'is null from then on; the routes that serve only the result answer 410 result_expired); ' +
          'null while it is kept',
      }),
  })
  .openapi('TaskSummary');

const pageOf = <T extends z.ZodTypeAny>(item: T, name: string) =>
  z
    .object({
      data: z.array(item),
      has_more: z.boolean(),
      next_cursor: z
        .string()
        .nullable()
        .openapi({ description: 'Pass as `cursor` for the next page; null on the last page' }),
    })
    .openapi(name);

export const TaskListResponse = pageOf(TaskSummary, 'TaskList');

export const TaskRecord = TaskSummary.extend({
  result: z
    .record(z.any())
    .nullable()
    .openapi({
      description:
        "The solver's result (screenshots and large page bodies read back from the artifact " +
        'store); null until it completes, when it ends without one, and after its retention ' +
        '(result_expired_at)',
    }),
  attempts: z.array(
    z.object({ solver_id: z.string(), started_at: z.string(), ended_at: z.string().nullable(), outcome: z.string() }),
  ),
}).openapi('TaskRecord');

export const LedgerEntry = z
  .object({
    entry_id: z.string(),
    kind: z.string().openapi({
      description:
        "deposit, hold, capture (a task's charge), release, payout (a solver's earning), fee, " +
        "forfeit (a solver's unvested pay taken back), fee_return (the platform's fee given back) " +
        "or refund (what a client paid for a task, given back); a solver's pay is held (hold) " +
        'until it vests (release)',
    }),
    amount: Amount,
    task_id: z
      .string()
      .nullable()
      .openapi({
        description:
          "The task the entry belongs to (null for a deposit); a solver's held pay names the task it " + 'was paid for',
      }),
    task_type: z.string().nullable(),
    available_change: Amount.openapi({ description: 'Signed change of available points' }),
    held_change: Amount.openapi({ description: 'Signed change of held points' }),
    created_at: z.string(),
  })
  .openapi('LedgerEntry');

export const Balance = z
  .object({
    account_id: z.string(),
    available_points: Amount.openapi({
      description: 'Points the account can spend: deposits, vested earnings, holds given back',
    }),
    held_points: Amount.openapi({
      description: "Points set aside: its running tasks' holds and its earnings not vested yet",
    }),
    lifetime_earned_points: Amount,
    lifetime_spent_points: Amount,
  })
  .openapi('Balance', {
    description: "Every value is a string (the contract); a solver's vesting detail is `GET " + '/v1/solver/earnings`',
  });

export const SolverEarnings = z
  .object({
    solver_id: z.string(),
    unvested_points: Amount.openapi({
      description:
        "Pay for tasks served that has not vested (part of the balance's held_points); a confirmed " +
        'quarantine forfeits it to refund the clients',
    }),
    unvested_tasks: z.number().int().openapi({ description: 'How many served tasks that pay belongs to' }),
    frozen: z.boolean().openapi({
      description:
        'The solver is quarantined: nothing vests until an admin clears (releases) or confirms ' + '(forfeits)',
    }),
    next_vesting_at: z
      .string()
      .nullable()
      .openapi({
        description:
          'When the oldest unvested pay vests by time (EARNINGS_VESTING_SECONDS); passed checks may ' +
          'vest it sooner once a sequential test has accepted the solver. Null when none, or while ' +
          'frozen',
      }),
  })
  .openapi('SolverEarnings', {
    description: 'A solver\'s earnings held until they vest (docs/trust.md, "Escrow and refunds")',
  });

export const LedgerPage = pageOf(LedgerEntry, 'LedgerPage');

export const LedgerSummary = z
  .object({
    data: z.array(
      z.object({
        day: z.string().openapi({ description: 'UTC day, YYYY-MM-DD' }),
        task_type: z.string().nullable().openapi({ description: 'null for entries of no task (deposits)' }),
        tasks: z.number().int(),
        entries: z.number().int(),
        amounts: z.record(Amount).openapi({ description: 'Sum of each entry kind' }),
        available_change: Amount,
        held_change: Amount,
      }),
    ),
  })
  .openapi('LedgerSummary');

export const ApiKeyInfo = z
  .object({
    key_id: z.string(),
    name: z.string(),
    prefix: z.string().openapi({ description: "The key's first 8 characters, to recognise it" }),
    created_at: z.string(),
    last_used_at: z.string().nullable().openapi({ description: 'Last authenticated request, to the minute' }),
    revoked_at: z.string().nullable(),
    restricted: z
      .boolean()
      .openapi({ description: 'The key cannot create, list, change or revoke keys (it may revoke itself)' }),
    spend_limit: z
      .object({
        points: z.string(),
        period: z.enum(SPEND_LIMIT_PERIODS),
        spent_points: z.string().openapi({ description: "Held and charged by the key's tasks in the current period" }),
      })
      .nullable(),
  })
  .openapi('ApiKey');

export const CreatedApiKey = ApiKeyInfo.extend({
  api_key: z.string().openapi({ description: 'The key itself, shown only in this answer' }),
}).openapi('CreatedApiKey');
export const ApiKeyList = z.object({ data: z.array(ApiKeyInfo) }).openapi('ApiKeyList');

export const AccountWebhook = z
  .object({
    url: z.string(),
    events: z.array(z.string()),
    updated_at: z.string(),
  })
  .openapi('AccountWebhook', {
    description: 'The webhook every new task of the account carries unless its request names its own',
  });

export const WebhookSecret = z
  .object({
    secret: z
      .string()
      .openapi({ description: 'whsec_ and the base64 of the key, as Standard Webhooks libraries take it' }),
    rotated_at: z.string(),
    previous_secret_expires_at: z
      .string()
      .nullable()
      .openapi({
        description:
          'Until when deliveries also carry the signature of the secret the last rotation replaced ' +
          '(null: they do not)',
      }),
  })
  .openapi('WebhookSecret');

export const WebhookLog = z
  .object({
    webhook: z.object({ url: z.string(), events: z.array(z.string()) }).nullable(),
    deliveries: z.array(
      z.object({
        delivery_id: z
          .string()
          .openapi({ description: "Also the Webhook-Id header, for the receiver's deduplication" }),
        event: z.string(),
        status: z.enum(DELIVERY_STATES),
        url: z.string(),
        created_at: z.string(),
        finished_at: z.string().nullable(),
        attempts: z.array(
          z.object({
            attempt: z.number().int(),
            started_at: z.string(),
            duration_ms: z.number().int(),
            status_code: z.number().int().nullable(),
            error: z.string().nullable(),
          }),
        ),
      }),
    ),
  })
  .openapi('WebhookLog');

export const WebhookResent = z
  .object({
    delivery_id: z.string(),
    task_id: z.string(),
    event: z.string(),
    status: z
      .literal('pending')
      .openapi({ description: 'Sent again: its attempts go on from the last one, with a new retry window' }),
    attempts: z.number().int().openapi({ description: 'Attempts made before this resend' }),
  })
  .openapi('WebhookResent');

export const SolverAttempts = z
  .object({
    data: z.array(
      z.object({
        task_id: z.string(),
        task_type: z.string(),
        attempt_number: z.number().int(),
        solver_id: z.string(),
        model_name: z.string(),
        price_points: z.string(),
        outcome: z.enum(ATTEMPT_OUTCOMES as [AttemptOutcome, ...AttemptOutcome[]]).openapi({
          description:
            'pending while it runs; error, rejected, timeout, disconnected and invalid_result count ' +
            'against the solver; cancelled (stopped by the service) and lost (lost to a fault of the ' +
            'platform: the node holding the socket died or shut down) do not',
        }),
        error: z
          .record(z.any())
          .nullable()
          .openapi({ description: 'Why a failed attempt failed ({type, message}), null otherwise' }),
        started_at: z.string(),
        accepted_at: z.string().nullable(),
        ended_at: z.string().nullable(),
      }),
    ),
  })
  .openapi('SolverAttempts');

/** GET /ready: whether this node can serve, with each part it depends on (every value a string, as /health's). */
export const Readiness = z
  .object({
    status: z.enum(['ready', 'not_ready', 'draining']).openapi({
      description: 'ready (200); not_ready when a part below is not ok, draining while the node stops (503)',
    }),
    postgres: z.string().openapi({ description: 'ok, timed_out (no answer within 2 s) or failed' }),
    temporal: z.string().openapi({ description: 'ok, timed_out (no answer within 2 s) or failed' }),
    worker: z.string().openapi({
      description:
        'polling when its Temporal workers poll their task queues, otherwise their run state ' + '(stopped, failed, …)',
    }),
    node_id: z.string().optional().openapi({ description: 'The API node that answered' }),
  })
  .openapi('Readiness');

const Evidence = z.record(z.any());

/** GET /v1/admin/solvers/{solver_id}/trust: one solver's record (docs/trust.md). */
export const SolverTrust = z
  .object({
    solver_id: z.string(),
    quarantined: z.boolean(),
    verifier: z.boolean().openapi({
      description: 'It re-runs sampled client tasks of other solvers (docs/trust.md, "Verified client tasks")',
    }),
    held_points: Amount.openapi({ description: 'Its pay held until it vests (docs/trust.md, "Escrow and refunds")' }),
    held_tasks: z.number().int().openapi({ description: 'How many tasks that pay belongs to' }),
    reputation: z.array(
      z.object({
        task_type: z.string(),
        score: z.number(),
        successes: z.number().openapi({ description: 'Decayed to now' }),
        failures: z.number().openapi({ description: 'Decayed to now' }),
        latency_ms: z.number().nullable(),
        canary_passes: z.number().int(),
        canary_failures: z.number().int(),
        redundant_runs: z.number().int(),
        disagreements: z.number().int(),
        verified_passes: z.number().int(),
        verified_failures: z.number().int(),
        client_work: z.boolean().openapi({ description: 'Whether matching offers it client tasks of the type' }),
        on_probation: z.boolean(),
      }),
    ),
    quarantines: z
      .array(Evidence)
      .openapi({ description: 'Open and cleared, newest first, each with its reason and evidence' }),
    disagreements: z
      .array(Evidence)
      .openapi({ description: 'Redundant runs it disagreed in, and runs that proved it wrong, newest first' }),
    usage_inflations: z.array(Evidence).openapi({
      description: 'Its chats whose reported usage was above the bound of what the service counted, newest ' + 'first',
    }),
    chat_audits: z
      .array(
        z.object({
          model: z
            .string()
            .openapi({ description: 'The model name of the strong-tier capability whose attempt answered the audits' }),
          passed: z.number().int(),
          failed: z.number().int(),
          pass_rate: z
            .number()
            .nullable()
            .openapi({ description: 'passed / (passed + failed); null when none was judged' }),
          passed_since_clear: z.number().int().openapi({
            description: 'Since an admin last cleared a quarantine of the solver: what the sequential test reads',
          }),
          failed_since_clear: z.number().int(),
          pass_rate_since_clear: z.number().nullable(),
        }),
      )
      .openapi({
        description:
          'Its judged chat audits per model that answered them (unanswered audits are not judged), by ' + 'model name',
      }),
    chat_audit_test: z
      .object({
        decision: z.enum(['continue', 'accept', 'quarantine']).openapi({
          description:
            'What its last judged audit decided: continue, accept (a test ended and another started) or ' +
            'quarantine',
        }),
        llr: z.number().openapi({ description: 'The log-likelihood ratio now (0 after an accept)' }),
        threshold: z.number().openapi({ description: 'The ratio at which it quarantines' }),
        judged: z
          .number()
          .int()
          .openapi({ description: 'Judged audits it read: the last 200 since the last cleared quarantine' }),
        failed: z.number().int(),
        near_quarantine: z.boolean().openapi({ description: 'The ratio is at or above half the threshold' }),
        expected_pass_rate: z.number(),
      })
      .nullable()
      .openapi({
        description:
          'The sequential test on its chat audits, one per solver whatever model answered (the ' +
          "judge's); null when never audited",
      }),
  })
  .openapi('SolverTrust', {
    description:
      "A solver's reputation, quarantines, held earnings, disagreements, usage reports and chat " +
      'audits (docs/trust.md)',
  });
