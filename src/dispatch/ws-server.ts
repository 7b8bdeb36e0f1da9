import type http from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer } from 'ws';
import type { Db } from '../db/pool';
import { ApiError } from '../errors';
import { authenticate } from '../http/auth';
import type { Logger } from '../logger';
import type { SolverHub } from './hub';
import type { KeyRevocations } from './key-revocations';

export const SOLVER_SOCKET_PATH = '/v1/solver/connect';

// Frames carry at most a solver result (a full-page screenshot is a few MB of base64).
export const MAX_FRAME_BYTES = 32 * 1024 * 1024;

function refuse(socket: Duplex, status: number, body: object) {
  const text = JSON.stringify(body);
  socket.end(
    `HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : status === 404 ? 'Not Found' : 'Error'}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
  );
}

/** Accepts solver WebSockets on the HTTP server, authenticating the api_key before the upgrade. */
export function attachSolverSockets(server: http.Server, deps: { db: Db; hub: SolverHub; revocations: KeyRevocations; logger: Logger }) {
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME_BYTES });
  server.on('upgrade', (request, socket, head) => {
    const path = (request.url ?? '').split('?')[0];
    if (path !== SOLVER_SOCKET_PATH) {
      refuse(socket, 404, { error: { type: 'not_found', message: `No WebSocket endpoint at ${path}; solvers connect to ${SOLVER_SOCKET_PATH}.` } });
      return;
    }
    authenticate(deps.db, request.headers.authorization)
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
        if (error instanceof ApiError) refuse(socket, error.status, error.toBody());
        else {
          deps.logger.error({ err: error }, 'solver upgrade failed');
          refuse(socket, 500, { error: { type: 'internal_error', message: 'Could not authenticate the connection; retry.' } });
        }
      });
  });
  return wss;
}
