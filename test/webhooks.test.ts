import crypto from 'node:crypto';
import dns from 'node:dns';
import fs from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import pino from 'pino';
import { Client as PgClient } from 'pg';
import { sql } from 'slonik';
import { Webhook } from 'standardwebhooks';
import { deliveryToSend, finishDelivery } from '../src/db/webhooks';
import { MIGRATIONS_DIR } from '../src/db/migrate';
import { createArtifactStore } from '../src/artifacts/store';
import { attemptDelivery } from '../src/webhooks/attempt';
import { createTemporalClient } from '../src/temporal/connection';
import { WebhookDeliveries } from '../src/webhooks/sender';
import { strongChat, suiteSolvers, talker, waitFor, type TaskFrame } from './support/fake-solver';
import { registry } from '../src/metrics/metrics';
import { spawnNode, type NodeProcess } from './support/processes';
import { ADMIN_KEY, api, registerAccount, startTestStack, testEndpoints, type TestStack } from './support/stack';
import { verifyWithPython } from './support/standardwebhooks-py';

interface Received {
  id: string;
  timestamp: string;
  signature: string;
  host: string;
  body: string;
  answered: number;
}

/** A webhook receiver on 127.0.0.1 that fails the first `failFirst` attempts of each delivery id. */
async function startReceiver(failFirst: number) {
  const received: Received[] = [];
  const seen = new Map<string, number>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const id = String(req.headers['webhook-id']);
      const count = (seen.get(id) ?? 0) + 1;
      seen.set(id, count);
      const answered = count <= failFirst ? 500 : 204;
      const signed = { timestamp: String(req.headers['webhook-timestamp']), signature: String(req.headers['webhook-signature']) };
      received.push({ id, ...signed, host: String(req.headers.host), body: Buffer.concat(chunks).toString(), answered });
      res.writeHead(answered).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  return { url, received, accepted: () => received.filter((entry) => entry.answered < 300), close: () => new Promise((resolve) => server.close(resolve)) };
}

/** The sum of a counter's values whose labels include `labels`. */
async function counted(name: string, labels: Record<string, string>): Promise<number> {
  const values = (await registry.getSingleMetric(name)!.get()).values;
  return values.filter((value) => Object.entries(labels).every(([key, label]) => value.labels[key] === label)).reduce((sum, value) => sum + value.value, 0);
}

const headersOf = (entry: Received) => ({ 'webhook-id': entry.id, 'webhook-timestamp': entry.timestamp, 'webhook-signature': entry.signature });

/** The receiver's check, as docs/decisions.md shows it: the official Standard Webhooks library. */
function verified(secret: string, entry: Received): boolean {
  try {
    new Webhook(secret).verify(entry.body, headersOf(entry));
    return true;
  } catch {
    return false;
  }
}

/**
 * Answers `answers` in turn (the last one from then on) for names under .rebind.test, to net's
 * `dns.lookup` and to `dns.promises.lookup` alike: a name that changes its answer between two looks.
 */
function rebindingDns(answers: string[]) {
  let asked = 0;
  const next = () => {
    const address = answers[Math.min(asked++, answers.length - 1)]!;
    return { address, family: net.isIP(address) };
  };
  const ours = (host: string) => host.endsWith('.rebind.test');
  const original = { lookup: dns.lookup, promised: dns.promises.lookup };
  const promised = jest.spyOn(dns.promises, 'lookup').mockImplementation(((host: string, options?: dns.LookupOptions) => {
    if (!ours(host)) return original.promised(host, options ?? {});
    const entry = next();
    return Promise.resolve(options?.all ? [entry] : entry);
  }) as typeof dns.promises.lookup);
  const callback = jest.spyOn(dns, 'lookup').mockImplementation(((host: string, options: any, done?: any) => {
    if (typeof options === 'function') [done, options] = [options, {}];
    if (!ours(host)) return original.lookup(host, options, done);
    const entry = next();
    process.nextTick(() => (options?.all ? done(null, [entry]) : done(null, entry.address, entry.family)));
  }) as unknown as typeof dns.lookup);
  return {
    asked: () => asked,
    restore: () => {
      promised.mockRestore();
      callback.mockRestore();
    },
  };
}

/**
 * Sockets to `host` ask their own lookup where they would connect, record it and fail as refused without
 * dialling: a test can then show which address a connection was pinned to without sending a packet there.
 */
function refuseDials(host: string) {
  const dialled: string[] = [];
  const connect = net.Socket.prototype.connect;
  const spy = jest.spyOn(net.Socket.prototype, 'connect').mockImplementation(function (this: net.Socket, ...args: any[]) {
    // net.createConnection passes its normalised arguments as one array.
    const options = Array.isArray(args[0]) ? args[0][0] : args[0];
    if (typeof options !== 'object' || options?.host !== host || typeof options.lookup !== 'function') return (connect as any).apply(this, args);
    options.lookup(host, { all: true }, (error: Error | null, answer: string | dns.LookupAddress[]) => {
      const address = Array.isArray(answer) ? answer[0]?.address : answer;
      if (address) dialled.push(address);
      // Later, as a real refusal comes: the request listens on its socket only once it has it.
      setImmediate(() => this.destroy(error ?? Object.assign(new Error(`connect ECONNREFUSED ${address}`), { code: 'ECONNREFUSED' })));
    });
    return this;
  } as typeof net.Socket.prototype.connect);
  return { dialled, restore: () => spy.mockRestore() };
}

describe('webhooks', () => {
  let stack: TestStack;
  const solver = suiteSolvers(() => stack.url);

  beforeAll(async () => {
    stack = await startTestStack({ env: { ACCEPT_TIMEOUT_MS: '1000', HEARTBEAT_INTERVAL_MS: '1000' } });
  });
  afterAll(async () => {
    await stack.close();
  });

  test('each wanted event is delivered once, signed, after failed attempts; unwanted events are not sent', async () => {
    const receiver = await startReceiver(2);
    try {
      await solver({ taskTypes: ['web_search'] });
      const client = await registerAccount(stack.url, '100');
      const { secret } = (await api(stack.url, 'GET', '/v1/account/webhook-secret', { headers: client.auth })).json;
      expect(secret).toMatch(/^whsec_/);
      const create = (body: Record<string, unknown>) => api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body });
      const completed = await create({ task_type: 'web_search', payload: { query: 'hook' }, webhook: { url: receiver.url } });
      expect(completed.status).toBe(200);
      const onlyFailures = await create({ task_type: 'web_search', payload: { query: 'quiet' }, webhook: { url: receiver.url, events: ['failed'] } });
      const toCancel = await create({ task_type: 'screenshot', payload: { url: 'https://example.com' }, webhook: { url: receiver.url, events: ['cancelled'] } });
      await api(stack.url, 'POST', `/v1/tasks/${toCancel.json.task_id}/cancel`, { headers: client.auth });

      // Two failed attempts (500), then accepted: 1 s and 2 s of backoff.
      await waitFor(() => receiver.accepted().length === 2, 30_000);
      await new Promise((resolve) => setTimeout(resolve, 2500));
      const accepted = receiver.accepted();
      expect(accepted).toHaveLength(2);
      for (const entry of receiver.received) expect(verified(secret, entry)).toBe(true);
      const bodies = accepted.map((entry) => JSON.parse(entry.body));
      expect(bodies.map((body) => [body.type, body.data.task_id]).sort()).toEqual(
        [['task.cancelled', toCancel.json.task_id], ['task.completed', completed.json.task_id]].sort(),
      );
      for (const [i, body] of bodies.entries()) expect(body.id).toBe(accepted[i].id);
      expect(bodies.find((body) => body.type === 'task.completed').data).toMatchObject({ status: 'completed', charged_points: '1', result: expect.any(Object) });
      // Every attempt of a delivery carries the same id, for the receiver's deduplication.
      expect(receiver.received.filter((entry) => entry.id === accepted[0].id)).toHaveLength(3);
      expect(receiver.received.some((entry) => entry.body.includes(onlyFailures.json.task_id))).toBe(false);
      // The worker (in this process) counts every attempt for Prometheus.
      const counted = (await registry.getSingleMetric('marketplace_webhook_delivery_attempts_total')!.get()).values;
      const attempts = (result: string) => counted.filter((value) => value.labels.result === result).reduce((sum, value) => sum + value.value, 0);
      expect({ delivered: attempts('delivered'), failed: attempts('failed') }).toEqual({ delivered: 2, failed: receiver.received.length - 2 });

      const log = await api(stack.url, 'GET', `/v1/tasks/${completed.json.task_id}/webhooks`, { headers: client.auth });
      expect(log.json.webhook).toEqual({ url: receiver.url, events: ['completed', 'failed', 'timed_out', 'cancelled', 'refunded'] });
      expect(log.json.deliveries).toEqual([
        expect.objectContaining({ event: 'completed', status: 'delivered', attempts: [expect.objectContaining({ attempt: 1, status_code: 500 }), expect.objectContaining({ attempt: 2, status_code: 500 }), expect.objectContaining({ attempt: 3, status_code: 204, error: null })] }),
      ]);
      expect((await api(stack.url, 'GET', `/v1/tasks/${onlyFailures.json.task_id}/webhooks`, { headers: client.auth })).json.deliveries).toEqual([]);
      const stranger = await registerAccount(stack.url);
      expect((await api(stack.url, 'GET', `/v1/tasks/${completed.json.task_id}/webhooks`, { headers: stranger.auth })).status).toBe(404);
    } finally {
      await receiver.close();
    }
  }, 60_000);

  describe('the first attempt, made by the process that finished the task', () => {
    let temporal: Client;
    beforeAll(async () => {
      temporal = await createTemporalClient(testEndpoints().temporalAddress, stack.config.temporalNamespace);
    });
    afterAll(async () => {
      await temporal?.connection.close();
    });
    const workflowOf = (taskId: string) => temporal.workflow.getHandle(`webhook-${taskId}-completed`).describe();
    const completion = (auth: Record<string, string>, taskId: string) =>
      waitFor(async () => (await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: auth })).json.status === 'completed');

    test('a delivery accepted at its first attempt starts no workflow', async () => {
      const receiver = await startReceiver(0);
      try {
        await solver({ taskTypes: ['web_search'] });
        const client = await registerAccount(stack.url, '100');
        const before = { direct: await counted('marketplace_webhook_delivery_attempts_total', { result: 'delivered', path: 'direct' }), workflows: await counted('marketplace_webhook_delivery_workflows_started_total', {}) };
        const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'first' }, webhook: { url: receiver.url } } });
        await completion(client.auth, created.json.task_id);
        await waitFor(() => receiver.accepted().length === 1, 10_000);
        await new Promise((resolve) => setTimeout(resolve, 500));

        expect(receiver.received).toHaveLength(1);
        await expect(workflowOf(created.json.task_id)).rejects.toBeInstanceOf(WorkflowNotFoundError);
        const log = await api(stack.url, 'GET', `/v1/tasks/${created.json.task_id}/webhooks`, { headers: client.auth });
        expect(log.json.deliveries).toEqual([expect.objectContaining({ event: 'completed', status: 'delivered', finished_at: expect.any(String), attempts: [expect.objectContaining({ attempt: 1, status_code: 204, error: null })] })]);
        expect(await counted('marketplace_webhook_delivery_attempts_total', { result: 'delivered', path: 'direct' })).toBe(before.direct + 1);
        expect(await counted('marketplace_webhook_delivery_workflows_started_total', {})).toBe(before.workflows);
      } finally {
        await receiver.close();
      }
    });

    test('a failed first attempt hands the delivery to its workflow, which delivers it once', async () => {
      const receiver = await startReceiver(1);
      try {
        await solver({ taskTypes: ['web_search'] });
        const client = await registerAccount(stack.url, '100');
        const before = await counted('marketplace_webhook_delivery_workflows_started_total', { reason: 'first_attempt_failed' });
        const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'retried' }, webhook: { url: receiver.url } } });
        await waitFor(() => receiver.accepted().length === 1, 20_000);
        await new Promise((resolve) => setTimeout(resolve, 2000));

        expect(receiver.received.map((entry) => entry.answered)).toEqual([500, 204]);
        expect(new Set(receiver.received.map((entry) => entry.id)).size).toBe(1);
        expect((await workflowOf(created.json.task_id)).status.name).toBe('COMPLETED');
        expect(await counted('marketplace_webhook_delivery_workflows_started_total', { reason: 'first_attempt_failed' })).toBe(before + 1);
        const log = await api(stack.url, 'GET', `/v1/tasks/${created.json.task_id}/webhooks`, { headers: client.auth });
        expect(log.json.deliveries).toEqual([
          expect.objectContaining({ status: 'delivered', attempts: [expect.objectContaining({ attempt: 1, status_code: 500 }), expect.objectContaining({ attempt: 2, status_code: 204 })] }),
        ]);
        // The workflow waited the backoff's first step (1 s) after the direct attempt, as it would after its own.
        const [first, second] = log.json.deliveries[0].attempts;
        expect(Date.parse(second.started_at) - Date.parse(first.started_at)).toBeGreaterThanOrEqual(1000);
      } finally {
        await receiver.close();
      }
    }, 30_000);

    test('a failed delivery is sent again at its client\'s request, once however many ask at once, by a new workflow that goes on from its last attempt', async () => {
      let accept = false;
      const received: { id: string; answered: number }[] = [];
      const receiver = http.createServer((req, res) => {
        req.resume();
        const answered = accept ? 204 : 500;
        received.push({ id: String(req.headers['webhook-id']), answered });
        res.writeHead(answered).end();
      });
      await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
      try {
        await solver({ taskTypes: ['web_search'] });
        const client = await registerAccount(stack.url, '100');
        const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
        const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'resent' }, webhook: { url, events: ['completed'] } } });
        const taskId = created.json.task_id as string;
        const resend = (auth: Record<string, string>, event = 'completed') => api(stack.url, 'POST', `/v1/tasks/${taskId}/webhooks/${event}/resend`, { headers: auth });
        // The receiver refuses until the delivery's time is up (its workflow ended, the delivery failed).
        await waitFor(() => received.length >= 1);
        await waitFor(async () => (await workflowOf(taskId).then(() => true, () => false)) || undefined);
        expect((await resend(client.auth)).json.error).toMatchObject({ type: 'webhook_delivery_not_failed', status: 'pending' });
        await temporal.workflow.getHandle(`webhook-${taskId}-completed`).terminate('its time is up');
        await finishDelivery(stack.db, `whd_${taskId}_completed`, 'failed');
        // An attempt in flight at the termination still logs itself.
        await new Promise((resolve) => setTimeout(resolve, 500));
        const failedAfter = received.length;

        // Another account's task is not found; an event the task has no delivery for, nor one that is no event, is refused.
        const stranger = await registerAccount(stack.url, '1');
        expect([(await resend(stranger.auth)).status, (await resend(stranger.auth)).json.error.type]).toEqual([404, 'task_not_found']);
        expect([(await resend(client.auth, 'failed')).status, (await resend(client.auth, 'failed')).json.error.type]).toEqual([404, 'webhook_delivery_not_found']);
        expect((await resend(client.auth, 'nope')).status).toBe(422);
        expect(received).toHaveLength(failedAfter);

        accept = true;
        const before = await counted('marketplace_webhook_delivery_workflows_started_total', { reason: 'resent' });
        const both = await Promise.all([resend(client.auth), resend(client.auth)]);
        expect(both.map((answer) => answer.status).sort()).toEqual([200, 409]);
        const winner = both.find((answer) => answer.status === 200)!;
        expect(winner.json).toEqual({ delivery_id: `whd_${taskId}_completed`, task_id: taskId, event: 'completed', status: 'pending', attempts: failedAfter });
        await waitFor(() => received.some((entry) => entry.answered === 204));
        await new Promise((resolve) => setTimeout(resolve, 1500));

        expect(received.filter((entry) => entry.answered === 204)).toHaveLength(1);
        expect(new Set(received.map((entry) => entry.id))).toEqual(new Set([`whd_${taskId}_completed`]));
        expect(await counted('marketplace_webhook_delivery_workflows_started_total', { reason: 'resent' })).toBe(before + 1);
        expect((await workflowOf(taskId)).status.name).toBe('COMPLETED');
        const log = await api(stack.url, 'GET', `/v1/tasks/${taskId}/webhooks`, { headers: client.auth });
        expect(log.json.deliveries).toEqual([expect.objectContaining({ status: 'delivered', finished_at: expect.any(String) })]);
        expect(log.json.deliveries[0].attempts.map((a: { attempt: number; status_code: number }) => [a.attempt, a.status_code])).toEqual([
          ...Array.from({ length: failedAfter }, (_, i) => [i + 1, 500]),
          [failedAfter + 1, 204],
        ]);
        // A delivered one is not sent again.
        expect((await resend(client.auth)).json.error).toMatchObject({ type: 'webhook_delivery_not_failed', status: 'delivered' });
      } finally {
        await new Promise((resolve) => receiver.close(resolve));
      }
    }, 60_000);

    test('a process makes at most WEBHOOK_DIRECT_CONCURRENCY first attempts at once, and leaves one written too long ago to the sweep', async () => {
      // A receiver that answers each delivery after 300 ms and notes how many it held at once.
      let open = 0;
      let mostOpen = 0;
      const ids: string[] = [];
      const server = http.createServer((req, res) => {
        open++;
        mostOpen = Math.max(mostOpen, open);
        ids.push(String(req.headers['webhook-id']));
        req.resume();
        setTimeout(() => {
          open--;
          res.writeHead(204).end();
        }, 300);
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        await solver({ taskTypes: ['web_search'] });
        const client = await registerAccount(stack.url, '100');
        const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
        // Finished tasks whose webhook wants no completion; the test writes their deliveries as an ending would.
        const taskIds: string[] = [];
        for (let i = 0; i < 7; i++) {
          const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: `burst ${i}` }, webhook: { url, events: ['failed'] } } });
          await completion(client.auth, created.json.task_id);
          await stack.db.query(sql.unsafe`UPDATE task_webhooks SET events = '{completed}' WHERE task_id = ${created.json.task_id}`);
          taskIds.push(created.json.task_id);
        }
        const [late, ...burst] = taskIds;
        for (const taskId of taskIds) {
          await stack.db.query(sql.unsafe`
            INSERT INTO webhook_deliveries (delivery_id, task_id, event, created_at)
            VALUES (${`whd_${taskId}_completed`}, ${taskId}, 'completed', now() - ${taskId === late ? '6 seconds' : '0 seconds'}::interval)`);
        }

        const deliveries = new WebhookDeliveries({ config: stack.config, directConcurrency: 2, db: stack.db, artifacts: createArtifactStore(stack.config), temporal, logger: pino({ level: 'silent' }), claimant: 'test' });
        const started = Date.now();
        deliveries.send(taskIds.map((task_id) => ({ task_id, event: 'completed' })));
        await deliveries.drain();

        expect(mostOpen).toBe(2);
        expect(ids.sort()).toEqual(burst.map((taskId) => `whd_${taskId}_completed`).sort());
        // Six attempts of 300 ms, two at a time.
        expect(Date.now() - started).toBeGreaterThanOrEqual(900);
        const log = async (taskId: string) => (await api(stack.url, 'GET', `/v1/tasks/${taskId}/webhooks`, { headers: client.auth })).json.deliveries[0];
        for (const taskId of burst) expect(await log(taskId)).toMatchObject({ status: 'delivered', attempts: [{ attempt: 1, status_code: 204 }] });
        // Unclaimed, it is the sweep's: no claim races the sweep's look at it.
        expect(await log(late)).toMatchObject({ status: 'pending', attempts: [] });
        const [row] = await stack.db.any(sql.unsafe`SELECT claimed_at FROM webhook_deliveries WHERE task_id = ${late}`);
        expect(row.claimed_at).toBeNull();
        await stack.db.query(sql.unsafe`UPDATE webhook_deliveries SET status = 'failed', finished_at = now() WHERE task_id = ${late}`);
      } finally {
        await new Promise((resolve) => server.close(resolve));
      }
    }, 30_000);

    test('the sweep hands stranded deliveries to their workflows: claimed by a process that died, or never claimed', async () => {
      const receiver = await startReceiver(0);
      try {
        await solver({ taskTypes: ['web_search'] });
        const client = await registerAccount(stack.url, '100');
        // Tasks whose webhook wants no completion: the test writes their deliveries as a crash would leave them.
        const finished = async (query: string) => {
          const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query }, webhook: { url: receiver.url, events: ['failed'] } } });
          await completion(client.auth, created.json.task_id);
          await stack.db.query(sql.unsafe`UPDATE task_webhooks SET events = '{completed}' WHERE task_id = ${created.json.task_id}`);
          return created.json.task_id as string;
        };
        const [claimedLongAgo, neverClaimed, claimedJustNow] = [await finished('crashed'), await finished('unclaimed'), await finished('in flight')];
        const write = (taskId: string, age: string, claimed: string | null) =>
          stack.db.query(sql.unsafe`
            INSERT INTO webhook_deliveries (delivery_id, task_id, event, created_at, claimed_at, claimed_by)
            VALUES (${`whd_${taskId}_completed`}, ${taskId}, 'completed', now() - ${age}::interval, now() - ${claimed}::interval, ${claimed && 'api:gone'})`);
        // Its claimer made a failed first attempt and died before handing the delivery to a workflow.
        await write(claimedLongAgo, '2 minutes', '2 minutes');
        await stack.db.query(sql.unsafe`INSERT INTO webhook_attempts (delivery_id, attempt, duration_ms, status_code, error) VALUES (${`whd_${claimedLongAgo}_completed`}, 1, 5, 500, 'the receiver answered 500')`);
        await write(neverClaimed, '30 seconds', null);
        await write(claimedJustNow, '5 seconds', '5 seconds');

        const deliveries = new WebhookDeliveries({ config: stack.config, db: stack.db, artifacts: createArtifactStore(stack.config), temporal, logger: pino({ level: 'silent' }), claimant: 'test' });
        expect(await deliveries.sweep()).toBeGreaterThanOrEqual(2);
        await waitFor(() => receiver.accepted().length === 2, 20_000);
        await new Promise((resolve) => setTimeout(resolve, 1000));

        expect(receiver.accepted().map((entry) => JSON.parse(entry.body).data.task_id).sort()).toEqual([claimedLongAgo, neverClaimed].sort());
        for (const taskId of [claimedLongAgo, neverClaimed]) expect((await workflowOf(taskId)).status.name).toBe('COMPLETED');
        const log = async (taskId: string) => (await api(stack.url, 'GET', `/v1/tasks/${taskId}/webhooks`, { headers: client.auth })).json.deliveries[0];
        // The workflow went on from the attempt its claimer had made.
        expect(await log(claimedLongAgo)).toMatchObject({ status: 'delivered', attempts: [{ attempt: 1, status_code: 500 }, { attempt: 2, status_code: 204 }] });
        expect(await log(neverClaimed)).toMatchObject({ status: 'delivered', attempts: [{ attempt: 1, status_code: 204 }] });
        // A claim within its grace is its claimer's still.
        expect(await log(claimedJustNow)).toMatchObject({ status: 'pending', attempts: [] });
        await expect(workflowOf(claimedJustNow)).rejects.toBeInstanceOf(WorkflowNotFoundError);
        // No later sweep (this suite's worker, or another suite's) is to send it to a receiver that is gone.
        await stack.db.query(sql.unsafe`UPDATE webhook_deliveries SET status = 'failed', finished_at = now() WHERE task_id = ${claimedJustNow}`);
      } finally {
        await receiver.close();
      }
    }, 30_000);
  });

  test('the account\'s default webhook is carried by every new task (convenience, compat, chat) unless the request names its own', async () => {
    const receiver = await startReceiver(0);
    const own = await startReceiver(0);
    try {
      await solver({ taskTypes: ['proxy_fetch', 'web_search'] });
      await solver({ behaviour: talker(['hi']), capabilities: strongChat() });
      const client = await registerAccount(stack.url, '500');
      const { secret } = (await api(stack.url, 'GET', '/v1/account/webhook-secret', { headers: client.auth })).json;
      const none = await api(stack.url, 'GET', '/v1/account/webhook', { headers: client.auth });
      expect([none.status, none.json.error.type]).toEqual([404, 'webhook_not_found']);
      const before = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/before' } });

      const set = await api(stack.url, 'PUT', '/v1/account/webhook', { headers: client.auth, body: { url: receiver.url } });
      expect(set.status).toBe(200);
      expect(set.json).toEqual({ url: receiver.url, events: ['completed', 'failed', 'timed_out', 'cancelled', 'refunded'], updated_at: expect.any(String) });
      expect((await api(stack.url, 'GET', '/v1/account/webhook', { headers: client.auth })).json).toEqual(set.json);
      // Replacing it keeps one per account.
      const onlyCompleted = await api(stack.url, 'PUT', '/v1/account/webhook', { headers: client.auth, body: { url: receiver.url, events: ['completed'] } });
      expect(onlyCompleted.json.events).toEqual(['completed']);

      const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/after' } });
      const scraped = await api(stack.url, 'POST', '/v1/compat/scraper/v1/search', { headers: client.auth, body: { query: 'hook' } });
      expect(scraped.status).toBe(200);
      const chat = await api(stack.url, 'POST', '/v1/chat/completions', { headers: client.auth, body: { model: 'strong', messages: [{ role: 'user', content: 'hi' }] } });
      expect(chat.status).toBe(200);
      const direct = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'default' } } });
      const ownHook = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'own' }, webhook: { url: own.url } } });
      const taskIds = [fetched.headers.get('x-task-id'), `chat_${chat.json.id.replace(/^chatcmpl-/, '')}`, direct.json.task_id];

      await waitFor(() => receiver.accepted().length >= 4 && own.accepted().length === 1, 30_000);
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const delivered = receiver.accepted().map((entry) => JSON.parse(entry.body));
      for (const entry of [...receiver.received, ...own.received]) expect(verified(secret, entry)).toBe(true);
      expect(delivered.every((body) => body.type === 'task.completed')).toBe(true);
      // fetch, the search compat's task, chat and the direct task; neither the task from before nor the one with its own webhook.
      expect(delivered).toHaveLength(4);
      expect(delivered.map((body) => body.data.task_id)).toEqual(expect.arrayContaining(taskIds));
      expect(delivered.map((body) => body.data.task_type).sort()).toEqual(['chat_completion', 'proxy_fetch', 'web_search', 'web_search']);
      expect(delivered.some((body) => body.data.task_id === before.headers.get('x-task-id'))).toBe(false);
      expect(JSON.parse(own.accepted()[0].body).data.task_id).toBe(ownHook.json.task_id);
      expect((await api(stack.url, 'GET', `/v1/tasks/${direct.json.task_id}/webhooks`, { headers: client.auth })).json.webhook).toEqual({ url: receiver.url, events: ['completed'] });

      const removed = await api(stack.url, 'DELETE', '/v1/account/webhook', { headers: client.auth });
      expect(removed.json).toEqual(onlyCompleted.json);
      expect((await api(stack.url, 'DELETE', '/v1/account/webhook', { headers: client.auth })).status).toBe(404);
      const after = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'after' } } });
      expect((await api(stack.url, 'GET', `/v1/tasks/${after.json.task_id}/webhooks`, { headers: client.auth })).json.webhook).toBeNull();
    } finally {
      await receiver.close();
      await own.close();
    }
  }, 60_000);

  test('deliveries carry Standard Webhooks signatures, which the official JavaScript and Python libraries verify', async () => {
    const receiver = await startReceiver(0);
    try {
      await solver({ taskTypes: ['web_search'] });
      const client = await registerAccount(stack.url, '100');
      const { secret } = (await api(stack.url, 'GET', '/v1/account/webhook-secret', { headers: client.auth })).json;
      // whsec_ and standard base64 of the key: what the libraries decode.
      expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
      const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'standard' }, webhook: { url: receiver.url } } });
      await waitFor(() => receiver.accepted().length === 1, 20_000);
      const [delivery] = receiver.received;
      expect(delivery!.signature).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
      expect(new Webhook(secret).verify(delivery!.body, headersOf(delivery!))).toMatchObject({ type: 'task.completed', data: { task_id: created.json.task_id } });

      // A changed body, another delivery's id, a stranger's secret: refused by both libraries.
      const tampered = { ...delivery!, body: delivery!.body.replace('"completed"', '"failed"') };
      const otherId = { ...delivery!, id: `${delivery!.id}x` };
      const stranger = `whsec_${crypto.randomBytes(32).toString('base64')}`;
      for (const forged of [tampered, otherId]) expect(verified(secret, forged)).toBe(false);
      expect(verified(stranger, delivery!)).toBe(false);
      const python = await verifyWithPython(secret, [delivery!, tampered, otherId].map((entry) => ({ headers: headersOf(entry), body: entry.body })));
      expect(python).toEqual([{ verified: true, type: 'task.completed' }, expect.objectContaining({ verified: false }), expect.objectContaining({ verified: false })]);
      expect(await verifyWithPython(stranger, [{ headers: headersOf(delivery!), body: delivery!.body }])).toEqual([expect.objectContaining({ verified: false })]);
    } finally {
      await receiver.close();
    }
  }, 60_000);

  test('after a rotation deliveries carry both signatures for the overlap, then only the new one', async () => {
    const receiver = await startReceiver(0);
    try {
      await solver({ taskTypes: ['web_search'] });
      const client = await registerAccount(stack.url, '100');
      const before = (await api(stack.url, 'GET', '/v1/account/webhook-secret', { headers: client.auth })).json;
      expect(before.previous_secret_expires_at).toBeNull();
      const rotated = (await api(stack.url, 'POST', '/v1/account/webhook-secret/rotate', { headers: client.auth })).json;
      expect(rotated.secret).not.toBe(before.secret);
      expect(rotated.secret).toMatch(/^whsec_/);
      expect(Date.parse(rotated.previous_secret_expires_at) - Date.parse(rotated.rotated_at)).toBe(24 * 3600 * 1000);
      expect((await api(stack.url, 'GET', '/v1/account/webhook-secret', { headers: client.auth })).json).toEqual(rotated);

      const deliver = async (query: string) => {
        const count = receiver.accepted().length;
        await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query }, webhook: { url: receiver.url } } });
        await waitFor(() => receiver.accepted().length === count + 1, 20_000);
        return receiver.accepted()[count]!;
      };
      const during = await deliver('during the overlap');
      expect(during.signature.split(' ')).toHaveLength(2);
      for (const secret of [rotated.secret, before.secret]) expect(verified(secret, during)).toBe(true);
      expect(await verifyWithPython(before.secret, [{ headers: headersOf(during), body: during.body }])).toEqual([{ verified: true, type: 'task.completed' }]);

      // The overlap is over: the replaced secret signs no more.
      await stack.db.query(sql.unsafe`UPDATE webhook_secrets SET rotated_at = now() - interval '24 hours 1 second' WHERE account_id = ${client.account_id}`);
      expect((await api(stack.url, 'GET', '/v1/account/webhook-secret', { headers: client.auth })).json.previous_secret_expires_at).toBeNull();
      const after = await deliver('after the overlap');
      expect(after.signature.split(' ')).toHaveLength(1);
      expect([verified(rotated.secret, after), verified(before.secret, after)]).toEqual([true, false]);

      // A second rotation: the secret it replaces overlaps, the one before that does not.
      const again = (await api(stack.url, 'POST', '/v1/account/webhook-secret/rotate', { headers: client.auth })).json;
      const third = await deliver('second rotation');
      expect([verified(again.secret, third), verified(rotated.secret, third), verified(before.secret, third)]).toEqual([true, true, false]);
    } finally {
      await receiver.close();
    }
  }, 60_000);

  describe('an attempt made directly', () => {
    /** A finished task of a new account with a pending delivery to `url` that nobody sends but the test. */
    async function pendingDelivery(url: string) {
      await solver({ taskTypes: ['web_search'] });
      const client = await registerAccount(stack.url, '100');
      const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'direct' }, webhook: { url, events: ['failed'] } } });
      await waitFor(async () => (await api(stack.url, 'GET', `/v1/tasks/${created.json.task_id}`, { headers: client.auth })).json.status === 'completed');
      const deliveryId = `whd_${created.json.task_id}_completed`;
      await stack.db.query(sql.unsafe`UPDATE task_webhooks SET events = '{completed}' WHERE task_id = ${created.json.task_id}`);
      // Claimed now, so that no sweep sends it on its own.
      await stack.db.query(sql.unsafe`INSERT INTO webhook_deliveries (delivery_id, task_id, event, claimed_at, claimed_by) VALUES (${deliveryId}, ${created.json.task_id}, 'completed', now(), 'test')`);
      return { client, delivery: (await deliveryToSend(stack.db, deliveryId))! };
    }

    test('a secret stored in URL-safe base64, as secrets were once made, keeps its key, and migration 0020 rewrites it for the libraries', async () => {
      const receiver = await startReceiver(0);
      try {
        const { client, delivery } = await pendingDelivery(receiver.url);
        let legacy: string;
        do legacy = `whsec_${crypto.randomBytes(32).toString('base64url')}`;
        while (!/[-_]/.test(legacy));
        await stack.db.query(sql.unsafe`INSERT INTO webhook_secrets (account_id, secret) VALUES (${client.account_id}, ${legacy})`);

        expect(await attemptDelivery({ db: stack.db, config: stack.config, artifacts: createArtifactStore(stack.config) }, delivery, 'direct')).toEqual({ result: 'delivered' });
        const signed = { headers: headersOf(receiver.received[0]!), body: receiver.received[0]!.body };
        const rewrite = fs.readFileSync(path.join(MIGRATIONS_DIR, '0020_webhook_secret_rotation.sql'), 'utf8').match(/UPDATE webhook_secrets[^;]*;/)![0];
        const pg = new PgClient({ connectionString: testEndpoints().databaseUrl });
        await pg.connect();
        try {
          await pg.query(rewrite);
        } finally {
          await pg.end();
        }
        const { secret } = (await api(stack.url, 'GET', '/v1/account/webhook-secret', { headers: client.auth })).json;
        expect(secret).toBe(`whsec_${Buffer.from(legacy.slice(6), 'base64url').toString('base64')}`);
        // The delivery signed before the rewrite verifies with the rewritten secret: the same key.
        expect(verified(secret, receiver.received[0]!)).toBe(true);
        expect(await verifyWithPython(secret, [signed])).toEqual([{ verified: true, type: 'task.completed' }]);
      } finally {
        await receiver.close();
      }
    }, 30_000);

    test('the connection goes to the address that was checked: a name that answers a public address, then loopback, never reaches loopback', async () => {
      const receiver = await startReceiver(0);
      const port = new URL(receiver.url).port;
      const strict = { ...stack.config, allowPrivateNetworks: false, webhookTimeoutMs: 1500 };
      try {
        const { delivery } = await pendingDelivery(`http://hook.rebind.test:${port}/hook`);
        // The check sees a public address; a second look would see the receiver. The socket is refused the
        // dial (recording where it would go), so no packet leaves this machine.
        const rebinding = rebindingDns(['11.22.33.44', '127.0.0.1']);
        const dialling = refuseDials('hook.rebind.test');
        let outcome;
        try {
          outcome = await attemptDelivery({ db: stack.db, config: strict, artifacts: createArtifactStore(strict) }, delivery, 'direct');
        } finally {
          rebinding.restore();
          dialling.restore();
        }
        expect(receiver.received).toHaveLength(0);
        // Tried at the checked address only, after one look.
        expect(dialling.dialled).toEqual(['11.22.33.44']);
        expect(outcome).toEqual({ result: 'failed', error: expect.any(String) });
        expect(rebinding.asked()).toBe(1);

        // A name that answers loopback at once is refused, and the delivery ends as failed.
        const loopback = rebindingDns(['127.0.0.1']);
        try {
          const again = (await deliveryToSend(stack.db, delivery.delivery_id))!;
          expect(await attemptDelivery({ db: stack.db, config: strict, artifacts: createArtifactStore(strict) }, again, 'direct')).toEqual({ result: 'refused', error: expect.stringContaining('loopback') });
        } finally {
          loopback.restore();
        }
        expect(receiver.received).toHaveLength(0);
        expect((await deliveryToSend(stack.db, delivery.delivery_id))!.status).toBe('failed');
      } finally {
        await receiver.close();
      }
    }, 30_000);

    test('the pinned connection keeps the name in its Host header and ignores a later answer', async () => {
      const receiver = await startReceiver(0);
      const port = new URL(receiver.url).port;
      try {
        const { delivery } = await pendingDelivery(`http://hook.rebind.test:${port}/hook`);
        const rebinding = rebindingDns(['127.0.0.1', '203.0.113.10']);
        try {
          expect(await attemptDelivery({ db: stack.db, config: stack.config, artifacts: createArtifactStore(stack.config) }, delivery, 'direct')).toEqual({ result: 'delivered' });
        } finally {
          rebinding.restore();
        }
        expect(receiver.received.map((entry) => entry.host)).toEqual([`hook.rebind.test:${port}`]);
      } finally {
        await receiver.close();
      }
    }, 30_000);
  });

  test('webhook targets obey the domain policy: private addresses are refused unless allowed', async () => {
    const strict = await startTestStack({ worker: false, env: { ALLOW_PRIVATE_NETWORKS: 'false' } });
    try {
      const client = await registerAccount(strict.url, '100');
      const refused = await api(strict.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'x' }, webhook: { url: 'http://127.0.0.1:9/hook' } } });
      expect(refused.status).toBe(403);
      expect(refused.json.error.type).toBe('domain_blocked');
      const bad = await api(strict.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'x' }, webhook: { url: 'https://example.com', events: ['done'] } } });
      expect(bad.status).toBe(422);
      expect(bad.json.detail[0].loc).toEqual(['body', 'webhook', 'events', 0]);
      expect((await api(strict.url, 'GET', '/v1/balance', { headers: client.auth })).json.held_points).toBe('0');
      const refusedDefault = await api(strict.url, 'PUT', '/v1/account/webhook', { headers: client.auth, body: { url: 'http://127.0.0.1:9/hook' } });
      expect([refusedDefault.status, refusedDefault.json.error.type]).toEqual([403, 'domain_blocked']);
      const badDefault = await api(strict.url, 'PUT', '/v1/account/webhook', { headers: client.auth, body: { url: 'not a url' } });
      expect([badDefault.status, badDefault.json.detail[0].loc]).toEqual([422, ['body', 'url']]);
      expect((await api(strict.url, 'GET', '/v1/account/webhook', { headers: client.auth })).status).toBe(404);
    } finally {
      await strict.close();
    }
  });

  describe('the API node that created the task dies', () => {
    let creator: NodeProcess;
    let creatorUrl: string;
    beforeAll(async () => {
      const endpoints = testEndpoints();
      creator = await spawnNode(
        'api',
        { DATABASE_URL: endpoints.databaseUrl, TEMPORAL_ADDRESS: endpoints.temporalAddress, TEMPORAL_TASK_QUEUE: stack.config.taskQueue, ADMIN_API_KEY: ADMIN_KEY, HOST: '127.0.0.1', LOCAL_SOLVER: 'off', ALLOW_PRIVATE_NETWORKS: 'true', PORT: '0', NODE_ID: `creator-${crypto.randomBytes(3).toString('hex')}` },
        /api listening/,
      );
      creatorUrl = JSON.parse(creator.output.join('').split('\n').find((line) => line.includes('api listening'))!).url;
    }, 120_000);
    afterAll(async () => {
      await creator?.kill('SIGKILL');
    });

    test('the delivery still arrives, once and verified, with a failed first attempt', async () => {
      const receiver = await startReceiver(1);
      try {
        let hold: TaskFrame | undefined;
        const worker = await solver({ taskTypes: ['web_search'], behaviour: (frame, self) => {
          hold = frame;
          self.send({ type: 'accept', attempt_id: frame.attempt_id });
        } });
        const client = await registerAccount(stack.url, '100');
        const { secret } = (await api(stack.url, 'GET', '/v1/account/webhook-secret', { headers: client.auth })).json;
        const created = await api(creatorUrl, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'orphan' }, webhook: { url: receiver.url, events: ['completed'] } } });
        expect(created.status).toBe(200);
        await waitFor(() => hold);
        await creator.kill('SIGKILL');
        worker.send({ type: 'result', attempt_id: hold!.attempt_id, result: { results: [{ title: 't', url: 'https://example.com', snippet: 's' }] } });

        await waitFor(() => receiver.accepted().length === 1, 30_000);
        await new Promise((resolve) => setTimeout(resolve, 2000));
        expect(receiver.accepted()).toHaveLength(1);
        expect(receiver.received).toHaveLength(2);
        for (const entry of receiver.received) expect(verified(secret, entry)).toBe(true);
        expect(JSON.parse(receiver.accepted()[0].body)).toMatchObject({ type: 'task.completed', data: { task_id: created.json.task_id, status: 'completed' } });
        const temporal = await createTemporalClient(testEndpoints().temporalAddress, 'default');
        const description = await temporal.workflow.getHandle(`webhook-${created.json.task_id}-completed`).describe();
        await temporal.connection.close();
        expect(description.status.name).toBe('COMPLETED');
      } finally {
        await receiver.close();
      }
    }, 60_000);
  });
});
