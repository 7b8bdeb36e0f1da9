import crypto from 'node:crypto';

/**
 * How a webhook delivery is signed, per the Standard Webhooks specification, so that its official
 * libraries verify it: `Webhook-Signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, `<id>`
 * and `<timestamp>` being the `Webhook-Id` and `Webhook-Timestamp` headers, keyed with the bytes the
 * base64 after `whsec_` encodes. Signing the id and the timestamp with the body lets a receiver refuse
 * replays. Several secrets (a rotation's overlap) give several signatures, separated by spaces.
 */

export const SECRET_PREFIX = 'whsec_';
// An HMAC-SHA256 key as long as its output: 256 bits.
const SECRET_BYTES = 32;

export const newSecret = () => `${SECRET_PREFIX}${crypto.randomBytes(SECRET_BYTES).toString('base64')}`;

/**
 * The key a secret stands for. Node's base64 decoder also reads the URL-safe alphabet in which secrets
 * were once made (migration 0020 rewrote the stored ones), so such a secret keeps its key.
 */
export const keyOf = (secret: string) =>
  Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, 'base64');

const signedWith = (secret: string, id: string, timestamp: number, body: string) =>
  `v1,${crypto.createHmac('sha256', keyOf(secret)).update(`${id}.${timestamp}.${body}`).digest('base64')}`;

/** The `Webhook-Signature` header: one signature per secret that is valid now. */
export const signatureOf = (secrets: readonly string[], id: string, timestamp: number, body: string) =>
  secrets.map((secret) => signedWith(secret, id, timestamp, body)).join(' ');

/**
 * What a receiver's library does (the benchmark's receiver uses it): true when one of the signatures is the
 * secret's.
 */
export function verifySignature(
  secret: string,
  headers: { id: string; timestamp: string; signature: string },
  body: string,
): boolean {
  const expected = Buffer.from(signedWith(secret, headers.id, Number(headers.timestamp), body));
  return headers.signature.split(' ').some((given) => {
    const candidate = Buffer.from(given);
    return candidate.length === expected.length && crypto.timingSafeEqual(candidate, expected);
  });
}
