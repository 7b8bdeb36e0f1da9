import type { RequestHandler, Response } from 'express';

/**
 * Server-Timing (W3C) on the routes that declare it: each step of the request up to its first byte, as
 * its duration in milliseconds, so a client (and the benchmark, docs/performance.md) sees where the time
 * before a first token goes. Only durations are told: no names of solvers, tasks or servers.
 */
export class StepTimes {
  private last: number;
  private readonly steps: string[] = [];

  constructor(start = performance.now()) {
    this.last = start;
  }

  /** Ends the step named `step` now; it began when the previous one ended (or the request arrived). */
  mark(step: string): void {
    const now = performance.now();
    this.steps.push(`${step};dur=${(now - this.last).toFixed(2)}`);
    this.last = now;
  }

  header(): string {
    return this.steps.join(', ');
  }
}

/** The request's step times (src/http/middleware.ts starts them as the request arrives). */
export const stepTimesOf = (res: Response): StepTimes | undefined => res.locals.stepTimes as StepTimes | undefined;

/** A handler that only ends a step: mounted between a route's checks (src/http/route.ts). */
export const markStep =
  (step: string): RequestHandler =>
  (_req, res, next) => {
    stepTimesOf(res)?.mark(step);
    next();
  };

/** Sets the header from the steps ended so far; called just before the headers are sent. */
export function sendStepTimes(res: Response): void {
  const times = stepTimesOf(res);
  if (times && !res.headersSent) res.setHeader('Server-Timing', times.header());
}
