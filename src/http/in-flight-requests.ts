import type http from 'node:http';

/**
 * The HTTP requests in flight, until their responses close (upgraded solver sockets are not requests).
 * While draining, no connection is kept open for further requests to a node that is going away.
 */
export class InFlightRequests {
  private readonly responses = new Set<http.ServerResponse>();
  private draining = false;
  private onIdle: (() => void) | undefined;

  constructor(private readonly server: http.Server) {
    // Ahead of the app, which may answer before later listeners run (as /health does).
    server.prependListener('request', (_req: http.IncomingMessage, res: http.ServerResponse) => {
      this.responses.add(res);
      if (this.draining) res.setHeader('Connection', 'close');
      res.once('close', () => {
        this.responses.delete(res);
        // A response whose headers went out before the drain began left its connection open: close it now.
        if (this.draining) setImmediate(() => this.server.closeIdleConnections());
        if (this.responses.size === 0) this.onIdle?.();
      });
    });
  }

  /** Resolves with how many requests are still in flight when they have all finished (0) or `graceMs` passed. */
  drained(graceMs: number): Promise<number> {
    this.draining = true;
    for (const res of this.responses) if (!res.headersSent) res.setHeader('Connection', 'close');
    if (this.responses.size === 0) return Promise.resolve(0);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(this.responses.size), graceMs);
      this.onIdle = () => {
        clearTimeout(timer);
        resolve(0);
      };
    });
  }
}
