import http from 'node:http';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import type { AddressInfo } from 'node:net';
import { SolverError } from '../errors';
import { resolveAllowedAddresses, type NetPolicy } from '../net-guard';

/**
 * A forward proxy on 127.0.0.1 that Chromium sends all its traffic through when private networks are
 * refused. page.route sees only the first request of a redirect chain and Chromium resolves names by
 * itself, so the proxy is where every hop and every connection is checked: it resolves the name once,
 * checks the addresses, and connects to the address it checked.
 */

/** Resolves a host to the address to connect to, or throws a `target_blocked` SolverError. */
export type TargetResolver = (host: string) => Promise<string>;

/**
 * Marks an answer the proxy made itself (a refused target, a name that does not resolve, a connection
 * that failed) with the SolverErrorType of the failure, so the page it shows is never taken for the
 * target's; the same header from a target is dropped.
 */
export const PROXY_ERROR_HEADER = 'x-solver-proxy-error';
const IDLE_TIMEOUT_MS = 60_000;

export function policyResolver(policy: NetPolicy): TargetResolver {
  return async (host) => (await resolveAllowedAddresses(host, policy))[0]!.address;
}

export type GuardProxy = { url: string; close(): Promise<void> };

export async function startGuardProxy(resolve: TargetResolver): Promise<GuardProxy> {
  const sockets = new Set<Duplex>();
  const server = http.createServer((req, res) => void forwardRequest(req, res, resolve));
  server.on(
    'connect',
    (req: http.IncomingMessage, client: Duplex, head: Buffer) => void tunnel(req, client, head, resolve, sockets),
  );
  server.on('connection', (socket: net.Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((done) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => done());
      }),
  };
}

function stripBrackets(host: string): string {
  return host.replace(/^\[|\]$/g, '');
}

async function forwardRequest(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  resolve: TargetResolver,
): Promise<void> {
  let target: URL;
  try {
    target = new URL(req.url ?? '');
    if (target.protocol !== 'http:') throw new Error('not http');
  } catch {
    res.writeHead(400, { 'content-type': 'text/plain' }).end('only absolute http:// URLs are proxied');
    return;
  }
  let address: string;
  try {
    address = await resolve(stripBrackets(target.hostname));
  } catch (error) {
    refuse(res, error);
    return;
  }
  const headers = withoutHopByHop(req.headers);
  const upstream = http.request(
    {
      host: address,
      port: target.port || 80,
      method: req.method,
      path: `${target.pathname}${target.search}`,
      headers,
      setHost: false,
    },
    (upstreamResponse) => {
      const headers = withoutHopByHop(upstreamResponse.headers);
      delete headers[PROXY_ERROR_HEADER];
      res.writeHead(upstreamResponse.statusCode ?? 502, headers);
      upstreamResponse.pipe(res);
    },
  );
  upstream.setTimeout(IDLE_TIMEOUT_MS, () => upstream.destroy());
  upstream.on('error', (error: NodeJS.ErrnoException) => {
    if (!res.headersSent)
      refuse(
        res,
        new SolverError('navigation_failed', `could not connect to ${target.host}: ${error.code ?? error.message}`),
      );
    else res.destroy();
  });
  req.pipe(upstream);
}

const HOP_BY_HOP = [
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
];

/** Headers that describe one connection, not the message, stay on their side of the proxy. */
function withoutHopByHop(headers: http.IncomingHttpHeaders): http.OutgoingHttpHeaders {
  const copy: http.OutgoingHttpHeaders = { ...headers };
  for (const name of HOP_BY_HOP) delete copy[name];
  return copy;
}

function refuse(res: http.ServerResponse, error: unknown): void {
  const failure =
    error instanceof SolverError
      ? error
      : new SolverError(
          'navigation_failed',
          error instanceof Error ? error.message : 'the proxy could not reach the target',
        );
  res
    .writeHead(failure.type === 'target_blocked' ? 403 : 502, {
      'content-type': 'text/plain',
      [PROXY_ERROR_HEADER]: failure.type,
    })
    .end(failure.message);
}

async function tunnel(
  req: http.IncomingMessage,
  client: Duplex,
  head: Buffer,
  resolve: TargetResolver,
  sockets: Set<Duplex>,
): Promise<void> {
  client.on('error', () => client.destroy());
  const match = (req.url ?? '').match(/^(\[[^\]]+\]|[^:]+):(\d+)$/);
  if (!match) {
    client.end('HTTP/1.1 400 Bad Request\r\n\r\n');
    return;
  }
  let address: string;
  try {
    address = await resolve(stripBrackets(match[1]!));
  } catch (error) {
    const blockedTarget = error instanceof SolverError && error.type === 'target_blocked';
    client.end(
      blockedTarget
        ? `HTTP/1.1 403 Forbidden\r\n${PROXY_ERROR_HEADER}: target_blocked\r\n\r\n`
        : 'HTTP/1.1 502 Bad Gateway\r\n\r\n',
    );
    return;
  }
  const upstream = net.connect({ host: address, port: Number(match[2]) });
  sockets.add(upstream);
  upstream.setTimeout(IDLE_TIMEOUT_MS, () => upstream.destroy());
  let connected = false;
  upstream.once('connect', () => {
    connected = true;
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) upstream.write(head);
    upstream.pipe(client);
    client.pipe(upstream);
  });
  upstream.on('error', () => (connected ? client.destroy() : client.end('HTTP/1.1 502 Bad Gateway\r\n\r\n')));
  upstream.on('close', () => {
    sockets.delete(upstream);
    client.destroy();
  });
  client.on('close', () => upstream.destroy());
}
