import crypto from 'node:crypto';

/**
 * How a webhook delivery is signed: `Webhook-Signature: v1=<hex HMAC-SHA256 of "<timestamp>.<body>">`
 * with the account's secret, `<timestamp>` being the `Webhook-Timestamp` header (Unix seconds). Signing
 * the timestamp with the body lets a receiver refuse replays of old deliveries.
 */

export const SIGNATURE_VERSION = 'v1';

export const signatureOf = (secret: string, timestamp: number, body: string) =>
  `${SIGNATURE_VERSION}=${crypto.createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;

/** What a receiver does (docs/decisions.md shows the same in a few lines): true when the signature is the secret's. */
export function verifySignature(secret: string, timestamp: string, body: string, signature: string): boolean {
  const expected = Buffer.from(signatureOf(secret, Number(timestamp), body));
  const given = Buffer.from(signature);
  return expected.length === given.length && crypto.timingSafeEqual(expected, given);
}
