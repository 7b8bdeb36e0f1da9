import type { z } from 'zod';
import { SolverError } from '../errors';

export type TaskPayload = Record<string, unknown>;
export type TaskResult = Record<string, unknown>;
export type ChatDelta = Record<string, unknown>;

export type HandlerContext = {
  /** Fires when the attempt is cancelled, passes its deadline or the agent shuts down. */
  signal: AbortSignal;
  /** When the attempt's deadline passes, on this machine's clock (epoch ms), when the task has one. */
  deadline?: number;
  /** Streams a partial result (chat deltas) to the marketplace before the final result. */
  emitChunk?: (delta: ChatDelta) => void;
};

export type TaskHandler = (payload: TaskPayload, context: HandlerContext) => Promise<TaskResult>;

/**
 * Payloads are the convenience bodies; fields this solver does not know are ignored, not refused
 * (or kept, for bodies that are forwarded as they are).
 */
export function parsePayload<Schema extends z.AnyZodObject>(
  schema: Schema,
  payload: TaskPayload,
  unknownKeys: 'strip' | 'keep' = 'strip',
): z.infer<Schema> {
  const parsed = (unknownKeys === 'strip' ? schema.strip() : schema.passthrough()).safeParse(payload);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.') || 'payload'}: ${issue.message}`);
    throw new SolverError('invalid_payload', `invalid payload: ${problems.join('; ')}`);
  }
  return parsed.data;
}
