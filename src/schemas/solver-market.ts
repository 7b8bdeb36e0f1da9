import { BILLING_TYPES, CAPABILITY_TASK_TYPES } from './domain';
import { z } from './zod';

/** GET /v1/solver/market: what a solver needs to know to price and run its work here. */
export const SolverMarket = z
  .object({
    protocol_version: z.number().int(),
    server_time: z.string().openapi({ description: 'The server clock (ISO 8601, UTC) as the answer was made' }),
    platform_fee_percent: z
      .string()
      .openapi({ description: 'Share of each settled price the platform keeps (decimal string)' }),
    strong_models: z.array(z.string()).openapi({
      description:
        'Models a chat_completion capability may claim tier "strong" for; chat goes to those ' + 'records only',
    }),
    task_types: z.record(
      z.enum(CAPABILITY_TASK_TYPES),
      z.object({
        default_max_price_points: z.string().openapi({
          description:
            'The maximum price of a task whose client names none; a record priced above it gets no such ' + 'task',
        }),
        strong_tier_only: z.boolean(),
        check_price_ceiling_points: z
          .string()
          .nullable()
          .openapi({
            description:
              'The highest min_price_points a check (canary) can pay: a record priced above it gets no ' +
              'client task of this type; null when no check is sent for the type',
          }),
        billing_types: z
          .array(z.enum(BILLING_TYPES))
          .openapi({ description: 'The billing types a record of this task type may have: per_token for chat only' }),
      }),
    ),
    accept_timeout_ms: z.number().int(),
    attempt_timeout_seconds: z.number().int(),
    heartbeat_interval_ms: z.number().int(),
    max_task_attempts: z.number().int(),
    default_task_timeout_seconds: z.number().int(),
    chat_timeout_seconds: z.number().int(),
    max_frame_bytes: z.number().int(),
  })
  .openapi('SolverMarket');
