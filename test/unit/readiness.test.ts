import { Readiness, workerCheck, workersCheck } from '../../src/services/readiness';
import { capturingLogger } from '../support/capturing-logger';

/** GET /ready's report (src/services/readiness.ts): bounded checks, one in flight per part, changes logged once. */
describe('readiness', () => {
  const never = () => new Promise<string>(() => undefined);
  const ok = async () => 'ok';

  test('a part that does not answer in time is timed_out, the others still named; the report comes at the timeout', async () => {
    const { logger, lines } = capturingLogger('info');
    const readiness = new Readiness({ postgres: never, temporal: ok }, { logger, timeoutMs: 50, extra: { node_id: 'n1' } });
    const started = Date.now();
    expect(await readiness.report()).toEqual({ ready: false, body: { status: 'not_ready', postgres: 'timed_out', temporal: 'ok', node_id: 'n1' } });
    expect(Date.now() - started).toBeLessThan(1000);
    // Said once, however many probes see it.
    await readiness.report();
    expect(lines.map((line) => JSON.parse(line).msg)).toEqual(['not ready: postgres timed_out']);
  });

  test('a check still running is joined by the next probe, not started again', async () => {
    let calls = 0;
    let release: (state: string) => void = () => undefined;
    const slow = () => {
      calls += 1;
      return new Promise<string>((resolve) => (release = resolve));
    };
    const { logger, lines } = capturingLogger('info');
    const readiness = new Readiness({ postgres: slow }, { logger, timeoutMs: 30 });
    await readiness.report();
    await readiness.report();
    expect(calls).toBe(1);
    // Its late answer is the next probe's.
    release('ok');
    expect(await readiness.report()).toEqual({ ready: true, body: { status: 'ready', postgres: 'ok' } });
    expect(calls).toBe(1);
    expect(lines.map((line) => JSON.parse(line).msg)).toEqual(['not ready: postgres timed_out', 'ready again: postgres ok']);
  });

  test('a failing part is failed (its error logged, not answered); a stopped or failed worker is named by its state; draining is 503', async () => {
    const { logger, lines } = capturingLogger('info');
    const status = (runState: string, poller = 'POLLING') => ({ getStatus: () => ({ runState, workflowPollerState: poller, activityPollerState: 'POLLING' }) });
    const readiness = new Readiness(
      {
        postgres: async () => {
          throw new Error('password authentication failed for user "x"');
        },
        worker: workersCheck([workerCheck(status('RUNNING')), workerCheck(status('STOPPED'))]),
        other: workerCheck(status('RUNNING', 'FAILED')),
      },
      { logger, timeoutMs: 50 },
    );
    const report = await readiness.report();
    expect(report.body).toEqual({ status: 'not_ready', postgres: 'failed', worker: 'stopped', other: 'failed' });
    expect(JSON.stringify(report.body)).not.toContain('password');
    expect(lines.join('')).toContain('password authentication failed');

    const healthy = new Readiness({ worker: workerCheck(status('RUNNING')) }, { logger });
    expect((await healthy.report()).body).toEqual({ status: 'ready', worker: 'polling' });
    healthy.drain();
    expect(await healthy.report()).toEqual({ ready: false, body: { status: 'draining', worker: 'polling' } });
  });
});
