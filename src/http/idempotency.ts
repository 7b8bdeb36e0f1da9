import crypto from 'node:crypto';
import type { Request } from 'express';
import type { Idempotency } from '../db/tasks/create';

// Longer keys are ignored rather than stored.
const MAX_KEY_LENGTH = 255;

/** JSON with every object's keys sorted: the same body sent in another key order is the same request. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, item]) => item !== undefined);
    return `{${entries
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([key, item]) => `${JSON.stringify(key)}:${canonicalJson(item)}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * The request's Idempotency-Key (Firecrawl's SDKs send X-Idempotency-Key) with its fingerprint, a digest of
 * the operation and the validated body; undefined without a key. A key is the account's: sent again with
 * the same operation and body it names the first request's task, with any other it is refused.
 */
export function idempotencyOf(req: Request, operation: string): Idempotency | undefined {
  const key = req.header('idempotency-key') ?? req.header('x-idempotency-key');
  if (!key || key.length > MAX_KEY_LENGTH) return undefined;
  const fingerprint = crypto
    .createHash('sha256')
    .update(canonicalJson([operation, req.body]))
    .digest('hex');
  return { key, fingerprint };
}
