import fs from 'node:fs';
import path from 'node:path';
import { bundleWorkflowCode, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { WORKFLOWS_PATH } from '../../src/temporal/bundle';
import pino from 'pino';
import { installTemporalRuntime } from '../../src/temporal/runtime';
import { HISTORIES_DIR, loadHistory } from '../support/record-histories';

/**
 * Histories recorded from earlier versions of the workflows (test/support/record-histories.ts) replay
 * on the current code: a change that would break workflows already running fails here. Every
 * `patched()` marker is covered by a history made before it (no marker: the old branch) and one
 * made after (the marker: the new branch).
 */
const files = fs.readdirSync(HISTORIES_DIR).filter((file) => file.endsWith('.json')).sort();
const read = (file: string) => JSON.parse(fs.readFileSync(path.join(HISTORIES_DIR, file), 'utf8'));

/** The patch ids a history's markers carry (their payloads are base64 JSON). */
function patchesIn(history: { events: Array<{ markerRecordedEventAttributes?: { markerName?: string; details?: Record<string, { payloads?: Array<{ data?: string }> }> } }> }): string[] {
  return history.events
    .filter((event) => event.markerRecordedEventAttributes?.markerName === 'core_patch')
    .flatMap((event) => Object.values(event.markerRecordedEventAttributes!.details ?? {}).flatMap((detail) => detail.payloads ?? []))
    .map((payload) => Buffer.from(payload.data ?? '', 'base64').toString('utf8'))
    .map((text) => JSON.parse(text))
    .filter((data): data is { id: string } => typeof data?.id === 'string')
    .map((data) => data.id);
}

describe('recorded workflow histories replay on the current code', () => {
  jest.setTimeout(120_000);
  let bundle: WorkflowBundleWithSourceMap;
  beforeAll(async () => {
    installTemporalRuntime(pino({ level: 'warn' }));
    bundle = await bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} } as never });
  });

  test.each(files)('%s', async (file) => {
    await Worker.runReplayHistory({ workflowBundle: bundle }, loadHistory(read(file)), file);
  });

  test('every patched() marker has a history from before it and one from after it', () => {
    const source = fs.readdirSync(path.dirname(WORKFLOWS_PATH)).map((file) => fs.readFileSync(path.join(path.dirname(WORKFLOWS_PATH), file), 'utf8')).join('\n');
    const markers = [...source.matchAll(/const (\w+_PATCH) = '([^']+)'/g)].map((match) => match[2]);
    expect(markers.length).toBeGreaterThan(0);
    // Every patched() call names one of those constants, so none escapes this check.
    const calls = [...source.matchAll(/\bpatched\(([^)]*)\)/g)].map((match) => match[1]!.trim());
    expect(calls.filter((argument) => !/^[A-Z_]+_PATCH$/.test(argument))).toEqual([]);
    const scenariosOf = (marker: string, present: boolean) =>
      new Set(files.filter((file) => patchesIn(read(file)).includes(marker) === present).map((file) => file.split('--')[1]));
    for (const marker of markers) {
      const after = scenariosOf(marker, true);
      const before = scenariosOf(marker, false);
      expect({ marker, covered: [...after].some((scenario) => before.has(scenario)) }).toEqual({ marker, covered: true });
    }
  });
});
