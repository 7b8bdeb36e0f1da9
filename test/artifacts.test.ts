import crypto from 'node:crypto';
import { GetObjectCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import FirecrawlAppV1 from 'firecrawl-js-v1';
import pino from 'pino';
import { sql } from 'slonik';
import { z } from 'zod';
import { ARTIFACT_MIN_BYTES } from '../src/artifacts/results';
import { createArtifactStore } from '../src/artifacts/store';
import { auditLedger, balanceFromEntries, getBalance } from '../src/db/ledger';
import { releaseIdempotencyKeys } from '../src/db/retention';
import { startApiNode, type ApiNode } from '../src/runtime/api-node';
import { deleteUntakenArtifacts } from '../src/tasks/records';
import { purgeExpired } from '../src/tasks/retention';
import { FakeSolver, SAMPLE_RESULTS, suiteSolvers, type TaskFrame } from './support/fake-solver';
import { startMoto, type MotoServer } from './support/moto';
import { ADMIN_KEY, api, registerAccount, startTestStack, testConfig, testEndpoints, type TestStack } from './support/stack';

const FAST = { ACCEPT_TIMEOUT_MS: '1000', ATTEMPT_TIMEOUT_SECONDS: '3', HEARTBEAT_INTERVAL_MS: '1000' };
const BUCKET = 'task-artifacts';
// A screenshot-sized image: a PNG signature and incompressible bytes, as a rendered page's PNG is.
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const pngOf = (size: number) => Buffer.concat([PNG_SIGNATURE, crypto.randomBytes(size)]);
const SHOT = pngOf(120_000);
const ACTION_SHOT = pngOf(60_000);
const sha256 = (bytes: Buffer) => crypto.createHash('sha256').update(bytes).digest('hex');

/** Screenshots are SHOT; a rendered page with actions answers one ACTION_SHOT per screenshot action and SHOT last (the screenshot format). */
function imageSolver(frame: TaskFrame, self: FakeSolver) {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  const payload = frame.payload as Record<string, any>;
  let result: Record<string, unknown>;
  if (frame.task_type === 'screenshot') {
    result = { mime_type: 'image/png', image_base64: SHOT.toString('base64'), width: 1280, height: 800 };
  } else if (frame.task_type === 'page_snapshot') {
    const shots = (payload.actions as Array<{ type: string }> | undefined)?.filter((action) => action.type === 'screenshot') ?? [];
    result = {
      url: payload.url,
      snapshot: '<html><body><h1>Rendered</h1></body></html>',
      snapshot_format: 'html',
      title: 'Rendered',
      status_code: 200,
      actions: { screenshots: shots.map((_, index) => (index === shots.length - 1 ? SHOT : ACTION_SHOT).toString('base64')), scrapes: [], javascript_returns: [] },
    };
  } else {
    result = SAMPLE_RESULTS[frame.task_type]!(payload);
  }
  self.send({ type: 'result', attempt_id: frame.attempt_id, result });
}

const objectBytes = async (s3: S3Client, key: string) => Buffer.from(await (await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }))).Body!.transformToByteArray());

describe('results in object storage, their retention, and idempotency keys that expire', () => {
  let moto: MotoServer;
  let s3: S3Client;
  let stack: TestStack;
  const solver = suiteSolvers(() => stack.url);

  beforeAll(async () => {
    moto = await startMoto();
    await moto.createBucket(BUCKET);
    s3 = moto.client();
    stack = await startTestStack({ env: { ...FAST, ...moto.env(BUCKET) } });
  });
  afterAll(async () => {
    await stack?.close();
    s3?.destroy();
    await moto?.stop();
  });

  const storedResult = (taskId: string) =>
    stack.db.one(sql.type(z.object({ result: z.record(z.any()).nullable(), text: z.string().nullable() }))`SELECT result, result::text AS text FROM tasks WHERE task_id = ${taskId}`);
  // Compared with Buffer.equals: Jest's deep equality walks a buffer byte by byte, for seconds.
  const bytesAt = async (url: string, headers: Record<string, string>, expected: Buffer = SHOT) => {
    const response = await fetch(url, { headers });
    return { status: response.status, type: response.headers.get('content-type'), identical: Buffer.from(await response.arrayBuffer()).equals(expected) };
  };

  test('a screenshot is kept in the S3 bucket, not in PostgreSQL, and every route serves its bytes unchanged', async () => {
    await solver({ behaviour: imageSolver });
    const client = await registerAccount(stack.url, '100');

    const shot = await api(stack.url, 'POST', '/v1/screenshot', { headers: client.auth, body: { url: 'https://example.com/shot' } });
    expect(shot.status).toBe(200);
    expect(Buffer.from(shot.json.image_base64, 'base64').equals(SHOT)).toBe(true);
    const taskId = shot.json.task_id as string;

    // The row holds a reference with the size and digest; the image itself is not in it.
    const row = await storedResult(taskId);
    expect(row.result!.image_base64).toEqual({
      $artifact: { key: expect.stringMatching(new RegExp(`^tasks/${taskId}/`)), size: SHOT.length, sha256: sha256(SHOT), content_type: 'image/png', encoding: 'base64' },
    });
    expect(row.text!.length).toBeLessThan(1000);
    expect(row.text).not.toContain(SHOT.toString('base64').slice(0, 64));
    const key = row.result!.image_base64.$artifact.key as string;
    expect((await objectBytes(s3, key)).equals(SHOT)).toBe(true);

    // The task record, the raw PNG, and the same request sent again by its Idempotency-Key.
    const record = await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth });
    expect(Buffer.from(record.json.result.image_base64, 'base64').equals(SHOT)).toBe(true);
    const pngRequest = { method: 'POST', headers: { ...client.auth, Accept: 'image/png', 'content-type': 'application/json', 'Idempotency-Key': 'png-once' }, body: JSON.stringify({ url: 'https://example.com/png' }) };
    const png = await fetch(`${stack.url}/v1/screenshot`, pngRequest);
    expect(png.headers.get('content-type')).toBe('image/png');
    expect(Buffer.from(await png.arrayBuffer()).equals(SHOT)).toBe(true);
    const again = await fetch(`${stack.url}/v1/screenshot`, pngRequest);
    expect(again.headers.get('x-task-id')).toBe(png.headers.get('x-task-id'));
    expect(Buffer.from(await again.arrayBuffer()).equals(SHOT)).toBe(true);

    const artifact = await fetch(`${stack.url}/v1/tasks/${taskId}/artifacts/image_base64`, { headers: client.auth });
    expect([artifact.status, artifact.headers.get('content-type'), artifact.headers.get('etag')]).toEqual([200, 'image/png', `"${sha256(SHOT)}"`]);
    expect(Buffer.from(await artifact.arrayBuffer()).equals(SHOT)).toBe(true);

    // Firecrawl v1 (its SDK) and v2 answer the screenshot with a URL the client fetches with its key.
    const firecrawl = new FirecrawlAppV1({ apiKey: client.api_key, apiUrl: `${stack.url}/v1/compat/scraper` });
    const v1 = await firecrawl.scrapeUrl('https://example.com/v1', { formats: ['screenshot'] });
    if (!v1.success) throw new Error(`scrape failed: ${JSON.stringify(v1)}`);
    expect(v1.screenshot).toMatch(new RegExp(`^${stack.url}/v1/tasks/task_[^/]+/artifacts/image_base64$`));
    expect(await bytesAt(v1.screenshot!, client.auth)).toEqual({ status: 200, type: 'image/png', identical: true });
    expect((await bytesAt(v1.screenshot!, {})).status).toBe(401);
    const stranger = await registerAccount(stack.url);
    expect((await bytesAt(v1.screenshot!, stranger.auth)).status).toBe(404);

    const v2 = await api(stack.url, 'POST', '/v1/compat/scraper/v2/scrape', { headers: client.auth, body: { url: 'https://example.com/v2', formats: ['screenshot'] } });
    expect(v2.status).toBe(200);
    expect(await bytesAt(v2.json.data.screenshot, client.auth)).toEqual({ status: 200, type: 'image/png', identical: true });

    // With actions, the actions' screenshots and the screenshot format come from one rendered page.
    const rendered = await api(stack.url, 'POST', '/v1/compat/scraper/v2/scrape', {
      headers: client.auth,
      body: { url: 'https://example.com/actions', formats: ['markdown', 'screenshot'], actions: [{ type: 'screenshot' }] },
    });
    expect(rendered.status).toBe(200);
    expect(rendered.json.data.actions.screenshots).toHaveLength(1);
    expect(await bytesAt(rendered.json.data.actions.screenshots[0], client.auth, ACTION_SHOT)).toEqual({ status: 200, type: 'image/png', identical: true });
    expect(await bytesAt(rendered.json.data.screenshot, client.auth)).toEqual({ status: 200, type: 'image/png', identical: true });
    expect(rendered.json.data.markdown).toContain('Rendered');
  });

  test(`a page body of ${ARTIFACT_MIN_BYTES} bytes or more goes to the store, a smaller one stays in the row`, async () => {
    const large = `<html><body>${'<p>row of text</p>'.repeat(Math.ceil(ARTIFACT_MIN_BYTES / 17))}</body></html>`;
    await solver({
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        const content = String(frame.payload.url).endsWith('/large') ? large : '<p>small</p>';
        self.send({ type: 'result', attempt_id: frame.attempt_id, result: { url: frame.payload.url, final_url: frame.payload.url, status_code: 200, content_type: 'html', content, title: null } });
      },
    });
    const client = await registerAccount(stack.url, '100');
    const big = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/large', raw_html: true } });
    expect(big.json.content).toBe(large);
    expect((await storedResult(big.json.task_id)).result!.content.$artifact).toMatchObject({ size: Buffer.byteLength(large), content_type: 'text/html; charset=utf-8', encoding: 'utf8' });
    const small = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/small', raw_html: true } });
    expect((await storedResult(small.json.task_id)).result!.content).toBe('<p>small</p>');
    const html = await fetch(`${stack.url}/v1/tasks/${big.json.task_id}/artifacts/content`, { headers: client.auth });
    expect([html.headers.get('content-type'), await html.text()]).toEqual(['text/html; charset=utf-8', large]);
  });

  test('an admin\'s completion stores its screenshot the same way; a result the task did not take leaves only the stored one\'s objects', async () => {
    const client = await registerAccount(stack.url, '100');
    const payee = await registerAccount(stack.url);
    // No screenshot solver is online: the task waits in line until the admin completes it.
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'screenshot', payload: { url: 'https://example.com/admin' } } });
    const taskId = created.json.task_id as string;
    const result = { mime_type: 'image/png', image_base64: SHOT.toString('base64'), width: 1280, height: 800 };
    const completed = await api(stack.url, 'POST', `/v1/admin/tasks/${taskId}/complete`, { headers: { 'X-Admin-API-Key': ADMIN_KEY }, body: { solver_id: payee.account_id, result } });
    expect(completed.status).toBe(200);
    expect(Buffer.from(completed.json.result.image_base64, 'base64').equals(SHOT)).toBe(true);
    const key = (await storedResult(taskId)).result!.image_base64.$artifact.key as string;
    expect(key).toBe(`tasks/${taskId}/admin/image_base64`);

    // A retried activity writes the stored result's keys again: those stay; another attempt's go.
    const artifacts = createArtifactStore(stack.config);
    const untaken = `tasks/${taskId}/${taskId}-2/image_base64`;
    await artifacts.put(untaken, SHOT, 'image/png');
    await deleteUntakenArtifacts({ db: stack.db, artifacts }, taskId, [key, untaken]);
    expect((await objectBytes(s3, key)).equals(SHOT)).toBe(true);
    await expect(objectBytes(s3, untaken)).rejects.toMatchObject({ name: 'NoSuchKey' });
  });

  test('a result whose screenshot cannot be written fails its attempt: the task fails and nothing is charged', async () => {
    // An API node whose store is a bucket that does not exist: every write of the solver it holds fails.
    let broken: ApiNode | undefined;
    let worker: FakeSolver | undefined;
    try {
      broken = await startApiNode({ config: testConfig({ ...FAST, ...moto.env('no-such-bucket') }), logger: pino({ level: 'silent' }), ...testEndpoints() });
      worker = await FakeSolver.start(broken.url, { behaviour: imageSolver });
      const client = await registerAccount(stack.url, '100');
      const shot = await api(broken.url, 'POST', '/v1/screenshot', { headers: client.auth, body: { url: 'https://example.com/unstored' } });
      expect(shot.status).toBe(502);
      const taskId = shot.headers.get('x-task-id')!;
      const record = await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth });
      expect(record.json).toMatchObject({ status: 'failed', result: null, charged_points: '0' });
      expect(record.json.attempts.length).toBeGreaterThan(0);
      // Not the solver's failure: its attempts end cancelled, and its reputation is untouched.
      expect(record.json.attempts.every((attempt: { outcome: string }) => attempt.outcome === 'cancelled')).toBe(true);
      const failures = await stack.db.maybeOneFirst(sql.type(z.object({ failures: z.number() }))`SELECT failures FROM solver_reputation WHERE solver_id = ${worker.solverId}`);
      expect(failures ?? 0).toBe(0);
      expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0', lifetime_spent_points: '0' });
      const left = await s3.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: `tasks/${taskId}/` }));
      expect(left.KeyCount ?? 0).toBe(0);
    } finally {
      await worker?.close();
      if (worker) await worker.offline(broken!.url);
      await broken?.close();
    }
  });

  test('past its retention a result is removed with its artifacts: the task keeps its state and cost, the ledger stays exact, result routes answer 410', async () => {
    await solver({ behaviour: imageSolver });
    const client = await registerAccount(stack.url, '100');
    const request = { headers: { ...client.auth, 'Idempotency-Key': 'kept-for-a-second' }, body: { url: 'https://example.com/retained' } };
    const shot = await api(stack.url, 'POST', '/v1/screenshot', request);
    expect(shot.status).toBe(200);
    const taskId = shot.json.task_id as string;
    const key = (await storedResult(taskId)).result!.image_base64.$artifact.key as string;
    const before = await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth });

    // A retention of one second, run as the worker's sweep runs it.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const run = await purgeExpired({ db: stack.db, artifacts: createArtifactStore(stack.config) }, 1);
    expect(run.results).toBeGreaterThanOrEqual(1);
    expect(run.artifacts).toBeGreaterThanOrEqual(1);
    expect((await purgeExpired({ db: stack.db, artifacts: createArtifactStore(stack.config) }, 1)).results).toBe(0);

    const after = await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth });
    const { result: _before, updated_at: _u1, result_expired_at: _e1, ...kept } = before.json;
    const { result, updated_at: _u2, result_expired_at: expiredAt, ...still } = after.json;
    expect(result).toBeNull();
    expect(expiredAt).toEqual(expect.any(String));
    expect(still).toEqual(kept);
    expect(still).toMatchObject({ status: 'completed', price_points: '1', charged_points: '1' });
    await expect(objectBytes(s3, key)).rejects.toMatchObject({ name: 'NoSuchKey' });

    const artifact = await api(stack.url, 'GET', `/v1/tasks/${taskId}/artifacts/image_base64`, { headers: client.auth });
    expect([artifact.status, artifact.json.error.type, artifact.json.error.result_expired_at]).toEqual([410, 'result_expired', expiredAt]);
    // The same request again within the key's 24 hours names the task, whose result is gone: 410, nothing charged.
    const replay = await api(stack.url, 'POST', '/v1/screenshot', request);
    expect([replay.status, replay.json.error.type]).toEqual([410, 'result_expired']);

    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '99', held_points: '0', lifetime_spent_points: '1' });
    expect(await balanceFromEntries(stack.db, client.account_id)).toEqual(await getBalance(stack.db, client.account_id));
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });

    const metrics = await api(stack.url, 'GET', '/metrics', { headers: { 'X-Admin-API-Key': ADMIN_KEY } });
    expect(metrics.text).toMatch(/^marketplace_results_purged_total [1-9]/m);
    expect(metrics.text).toMatch(/^marketplace_artifacts_deleted_total [1-9]/m);
    expect(metrics.text).toMatch(/^marketplace_retention_purge_duration_seconds_count [1-9]/m);
  });

  test('an Idempotency-Key names its task for 24 hours; sent again after that, it starts a new task', async () => {
    await solver({ behaviour: 'ok' });
    const client = await registerAccount(stack.url, '100');
    const create = () => api(stack.url, 'POST', '/v1/tasks', { headers: { ...client.auth, 'Idempotency-Key': 'daily' }, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/key' } } });
    const first = await create();
    expect((await create()).json.task_id).toBe(first.json.task_id);
    await stack.db.query(sql.unsafe`UPDATE tasks SET created_at = created_at - interval '25 hours' WHERE task_id = ${first.json.task_id}`);
    const later = await create();
    expect(later.status).toBe(200);
    expect(later.json.task_id).not.toBe(first.json.task_id);
    expect((await create()).json.task_id).toBe(later.json.task_id);

    // The purge releases keys past their window in batches, so the index of keys stays small.
    const other = await api(stack.url, 'POST', '/v1/tasks', { headers: { ...client.auth, 'Idempotency-Key': 'aged' }, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/aged' } } });
    await stack.db.query(sql.unsafe`UPDATE tasks SET created_at = created_at - interval '25 hours' WHERE task_id = ${other.json.task_id}`);
    // The stack's worker runs the same release every minute and may have taken this key first: what
    // counts is that the key is gone, whichever call released it.
    await releaseIdempotencyKeys(stack.db, 100);
    expect(await stack.db.oneFirst(sql.type(z.object({ key: z.string().nullable() }))`SELECT idempotency_key AS key FROM tasks WHERE task_id = ${other.json.task_id}`)).toBeNull();
  });
});
