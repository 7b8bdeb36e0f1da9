import { BrowserPool } from '../../../src/solver/browser/browser-pool';
import { createPageSnapshotHandler } from '../../../src/solver/handlers/page-snapshot';
import { createScreenshotHandler } from '../../../src/solver/handlers/screenshot';
import { startFixtureServer, type FixtureServer } from './fixture-server';

/**
 * One browser for a test file, with the snapshot and screenshot handlers on it and the fixture site,
 * started before its tests and stopped after them.
 */
export function sharedBrowser() {
  const policy = { allowPrivateNetworks: true };
  const pool = new BrowserPool({ executablePath: '/usr/bin/chromium', pages: 2, policy, timeoutMs: 20_000 });
  const shared = {
    policy,
    pool,
    snapshot: createPageSnapshotHandler({ pool, policy, timeoutMs: 20_000, maxBytes: 200 * 1024 }),
    screenshot: createScreenshotHandler({ pool, policy, timeoutMs: 20_000 }),
    signal: () => new AbortController().signal,
    server: undefined as unknown as FixtureServer,
  };
  beforeAll(async () => {
    shared.server = await startFixtureServer();
    await pool.start();
  });
  afterAll(async () => {
    await pool.close();
    await shared.server.close();
  });
  return shared;
}
