import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/config';
import { resolveTemporalCli, startEmbeddedTemporal, type EmbeddedTemporalHandle } from '../src/embedded/temporal';
import { capturingLogger, freePort } from './support/stack';

/** The embedded Temporal UI stays on the port asked for (TEMPORAL_UI_PORT, 8233 by default) and says so when it cannot. */
describe('the embedded Temporal UI port', () => {
  const config = loadConfig();
  const dirs: string[] = [];
  const handles: EmbeddedTemporalHandle[] = [];
  const start = async (uiPort: number) => {
    const dir = fs.mkdtempSync(path.join(process.env.TEST_DATA_DIR ?? os.tmpdir(), 'temporal-ui-'));
    dirs.push(dir);
    const { logger, lines } = capturingLogger('warn');
    const handle = await startEmbeddedTemporal({ cli: resolveTemporalCli(config.rootDir, config.temporalCli), dir, namespace: 'default', logger, uiPort });
    handles.push(handle);
    return { handle, lines };
  };

  afterAll(async () => {
    for (const handle of handles) await handle.stop();
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the default is start-dev\'s own 8233', () => {
    expect(loadConfig({}).temporalUiPort).toBe(8233);
    expect(loadConfig({ TEMPORAL_UI_PORT: '9233' }).temporalUiPort).toBe(9233);
  });

  test('a free port is used as asked, silently; a taken one gives another port with a warning that names both', async () => {
    const wanted = await freePort();
    const first = await start(wanted);
    expect(first.handle.uiUrl).toBe(`http://127.0.0.1:${wanted}`);
    expect(first.handle.uiPortTaken).toBeUndefined();
    expect(first.lines).toEqual([]);
    expect((await fetch(first.handle.uiUrl)).status).toBe(200);

    // The first UI now holds it: a second server asked for the same port serves its UI elsewhere and says so.
    const second = await start(wanted);
    expect(second.handle.uiPortTaken).toBe(wanted);
    expect(second.handle.uiUrl).not.toBe(first.handle.uiUrl);
    expect((await fetch(second.handle.uiUrl)).status).toBe(200);
    expect(second.lines.map((line) => JSON.parse(line).msg)).toEqual([expect.stringContaining(`Temporal UI port ${wanted} is taken`)]);
    expect(second.lines[0]).toContain(second.handle.uiUrl);
  }, 120_000);
});
