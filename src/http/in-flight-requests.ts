import type http from 'node:http';

/** Counts HTTP requests until their responses close (upgraded solver sockets are not requests). */
export class InFlightRequests {
  private count = 0;
  private draining = false;
  private onIdle: (() => void) | undefined;

  constructor(server: http.Server) {
    // Ahead of the app, which may answer before later listeners run (as /health does).
    server.prependListener('request', (_req: http.IncomingMessage, res: http.ServerResponse) => {
      this.count += 1;
      // A keep-alive connection would otherwise carry new requests to a node that is going away.
      if (this.draining && !res.headersSent) res.setHeader('Connection', 'close');
      res.once('close', () => {
        this.count -= 1;
        if (this.count === 0) this.onIdle?.();
      });
    });
  }

  /** Resolves with how many requests are still in flight when they have all finished (0) or `graceMs` passed. */
  drained(graceMs: number): Promise<number> {
    this.draining = true;
    if (this.count === 0) return Promise.resolve(0);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(this.count), graceMs);
      this.onIdle = () => {
        clearTimeout(timer);
        resolve(0);
      };
    });
  }
}
