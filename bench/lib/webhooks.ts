import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { verifySignature } from '../../src/signing/webhook-signature';

/**
 * The benchmark's webhook receiver (`--webhooks`), on 127.0.0.1 in the benchmark's process: it accepts
 * every delivery (204) and counts those whose signature verifies with the account's secret, once per
 * delivery id, as a receiver that deduplicates would.
 */
export async function startWebhookReceiver(secret: string) {
  const verified = new Set<string>();
  let duplicates = 0;
  let unverified = 0;
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (part: string) => (body += part));
    req.on('end', () => {
      const id = String(req.headers['webhook-id']);
      const signed = { id, timestamp: String(req.headers['webhook-timestamp']), signature: String(req.headers['webhook-signature']) };
      if (!verifySignature(secret, signed, body)) unverified += 1;
      else if (verified.has(id)) duplicates += 1;
      else verified.add(id);
      res.writeHead(204).end();
    });
  });
  // Every delivery of a phase may arrive at once.
  server.maxConnections = 10_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    counts: () => ({ verified: verified.size, duplicates, unverified }),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
