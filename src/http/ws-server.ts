import type http from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer } from 'ws';
import type { Account } from '../db/accounts';
import { ApiError } from '../errors';
import type { AddressLimits } from './address-limits';
import { authenticate } from './auth';
import type { Logger } from '../logger';
import type { SolverHub } from '../dispatch/hub';
import type { KeyRevocations } from '../dispatch/key-revocations';

export const SOLVER_SOCKET_PATH = '/v1/solver/connect';

// Frames carry at most a solver result (a full-page screenshot is a few MB of base64).
export const MAX_FRAME_BYTES = 32 * 1024 * 1024;

const REASONS: Record<number, string> = { 401: 'Unauthorized', 404: 'Not Found', 429: 'Too Many Requests' };

function refuse(socket: Duplex, status: number, body: object, headers: Record<string, string> = {}) {
  const text = JSON.stringify(body);
  const extra = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  socket.end(
    `HTTP/1.1 ${status} ${REASONS[status] ?? 'Error'}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n${extra}Connection: close\r\n\r\n${text}`,
  );
}

/** Accepts solver WebSockets on the HTTP server, authenticating the api_key before the upgrade. */
export function attachSolverSockets(
  server: http.Server,
  deps: {
    findAccountByApiKey: (apiKey: string) => Promise<Account | null>;
    hub: SolverHub;
    revocations: KeyRevocations;
    addresses: AddressLimits;
    logger: Logger;
  },
) {
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME_BYTES });
  server.on('upgrade', (request, socket, head) => {
    const path = (request.url ?? '').split('?')[0];
    if (path !== SOLVER_SOCKET_PATH) {
      refuse(socket, 404, {
        error: {
          type: 'not_found',
          message: `No WebSocket endpoint at ${path}; solvers connect to ${SOLVER_SOCKET_PATH}.`,
        },
      });
      return;
    }
    // Every attempt counts against its address before the key is read, so a flood costs one statement each.
    deps.addresses
      .admit(request, 'solver_connect')
      .then(() => authenticate(deps.findAccountByApiKey, request.headers.authorization))
      .then((account) => {
        const keyId = account.key_id!;
        wss.handleUpgrade(request, socket, head, (ws) => {
          deps.hub.attach(ws, account.account_id, keyId).catch((error) => {
            deps.logger.error({ err: error }, 'could not register solver connection');
            ws.close(1011, 'internal error');
          });
          void deps.revocations.check([keyId]);
        });
      })
      .catch((error) => {
        if (error instanceof ApiError) refuse(socket, error.status, error.toBody(), error.headers);
        else {
          deps.logger.error({ err: error }, 'solver upgrade failed');
          refuse(socket, 500, {
            error: { type: 'internal_error', message: 'Could not authenticate the connection; retry.' },
          });
        }
      });
  });
  return wss;
}
