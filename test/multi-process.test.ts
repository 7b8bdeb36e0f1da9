import crypto from 'node:crypto';
import { sql } from 'slonik';
import { z } from 'zod';
import { createDb, type Db } from '../src/db/pool';
import { getBalance } from '../src/db/ledger';
import { nodeSessionName, presenceKey } from '../src/db/node-presence';
import { removeNode } from '../src/db/solvers';
import { FakeSolver, SAMPLE_RESULTS, strongChat, talker, waitFor } from './support/fake-solver';
import { spawnNode, type NodeProcess } from './support/processes';
import { ADMIN_KEY, api, QUIET_TRUST_ENV, registerAccount, testEndpoints } from './support/stack';

/** Two API processes and a separate worker process on one Temporal and one PostgreSQL. */
describe('a deployment of several processes', () => {
  const endpoints = testEndpoints();
  const env = {
    DATABASE_URL: endpoints.databaseUrl,
    TEMPORAL_ADDRESS: endpoints.temporalAddress,
    // A queue of its own, so that no other test's worker takes these workflows.
    TEMPORAL_TASK_QUEUE: `multi-${crypto.randomBytes(4).toString('hex')}`,
    ADMIN_API_KEY: ADMIN_KEY,
    HEARTBEAT_INTERVAL_MS: '1000',
    ACCEPT_TIMEOUT_MS: '2000',
    HOST: '127.0.0.1',
    LOCAL_SOLVER: 'off',
    ...QUIET_TRUST_ENV,
    WORKFLOW_BUNDLE_PATH: process.env.WORKFLOW_BUNDLE_PATH ?? '',
    // Workflows run only in the worker process here, so that killing it is a real crash of the orchestration.
    API_RUNS_WORKFLOWS: 'false',
  };
  let apiA: NodeProcess;
  let apiB: NodeProcess;
  let worker: NodeProcess;
  let db: Db;
  const urlA = () => urlOf(apiA);
  const urlB = () => urlOf(apiB);
  const listening = (node: NodeProcess) => {
    const line = node.output.join('').split('\n').find((entry) => entry.includes('api listening'));
    return JSON.parse(line!) as { url: string; pid: number; node_id: string };
  };
  const urlOf = (node: NodeProcess) => listening(node).url;
  // As a restart under the same NODE_ID would: matching stops offering the node's solvers at once.
  const forgetNode = (node: NodeProcess) => removeNode(db, listening(node).node_id);
  // A worker waits on a node's presence from a moment after the node starts (it hears the node announce
  // itself); a node killed before then is seen only when its heartbeat lapses, as in a deployment.
  const watched = (node: NodeProcess) =>
    db.exists(sql.unsafe`
      SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND NOT granted
        AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(${presenceKey(listening(node).node_id)}, 0)`);
  const lostBecause = (taskId: string) =>
    db.oneFirst(sql.type(z.object({ message: z.string() }))`
      SELECT error->>'message' AS message FROM task_attempts WHERE task_id = ${taskId} AND outcome = 'lost'`);

  beforeAll(async () => {
    [apiA, apiB, worker] = await Promise.all([
      spawnNode('api', { ...env, PORT: '0', NODE_ID: `node-a-${env.TEMPORAL_TASK_QUEUE}` }, /api listening/),
      spawnNode('api', { ...env, PORT: '0', NODE_ID: `node-b-${env.TEMPORAL_TASK_QUEUE}` }, /api listening/),
      spawnNode('worker', env, /temporal worker started/),
    ]);
    db = await createDb(endpoints.databaseUrl);
  }, 120_000);

  afterAll(async () => {
    await Promise.all([apiA?.kill(), apiB?.kill(), worker?.kill()]);
    // The node killed on purpose would look alive for a few more seconds; forget it, as a restart would.
    await db?.query(sql.unsafe`DELETE FROM api_nodes WHERE node_id LIKE ${`%${env.TEMPORAL_TASK_QUEUE}`}`);
    await db?.end();
  });

  test('a solver connected to node A serves a client calling node B', async () => {
    const solver = await FakeSolver.start(urlA(), { price: '2' });
    const client = await registerAccount(urlB(), '50');
    const fetched = await api(urlB(), 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/cross' } });
    expect(fetched.status).toBe(200);
    expect(fetched.json.content).toBe('# Hello');
    const record = await api(urlA(), 'GET', `/v1/tasks/${fetched.json.task_id}`, { headers: client.auth });
    expect(record.json).toMatchObject({ status: 'completed', solver_id: solver.solverId, price_points: '2' });
    await solver.close();
  });

  test('the worker killed mid-task and restarted: the task finishes with one charge and one payout', async () => {
    let release: (() => void) | undefined;
    const solver = await FakeSolver.start(urlA(), {
      price: '3',
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        release = () => self.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS[frame.task_type](frame.payload) });
      },
    });
    const client = await registerAccount(urlB(), '50');
    const created = await api(urlB(), 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/k' } } });
    const taskId = created.json.task_id as string;
    await waitFor(() => release !== undefined);
    await worker.kill('SIGKILL');
    release!();
    worker = await spawnNode('worker', env, /temporal worker started/);
    const done = await waitFor(async () => {
      const response = await api(urlB(), 'GET', `/v1/tasks/${taskId}`, { headers: client.auth });
      return response.json.status === 'completed' ? response.json : undefined;
    }, 60_000);
    expect(done.solver_id).toBe(solver.solverId);
    const entries = await db.any(sql.type(z.object({ kind: z.string(), count: z.number() }))`
      SELECT kind, count(*)::int AS count FROM ledger_entries WHERE hold_id = ${taskId} GROUP BY kind ORDER BY kind`);
    expect(Object.fromEntries(entries.map((entry) => [entry.kind, entry.count]))).toEqual({ capture: 1, fee: 1, hold: 1, payout: 1, release: 1 });
    expect(await getBalance(db, client.account_id)).toMatchObject({ available_points: '47', held_points: '0', lifetime_spent_points: '3' });
    expect((await getBalance(db, solver.solverId))?.available_points).toBe('2.7');
    await solver.close();
  }, 120_000);

  test('a task waiting in line while the worker is killed is handed its slot and served once the worker is back', async () => {
    let first: string | undefined;
    let releaseFirst: (() => void) | undefined;
    const solver = await FakeSolver.start(urlA(), {
      price: '2',
      taskTypes: ['screenshot'],
      maxConcurrent: 1,
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        const answer = () => self.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS.screenshot(frame.payload) });
        first ??= frame.task_id;
        if (frame.task_id === first) releaseFirst = answer;
        else answer();
      },
    });
    const client = await registerAccount(urlB(), '50');
    const post = () => api(urlB(), 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'screenshot', payload: { url: 'https://example.com/w' }, max_price_points: 5 } });
    const running = await post();
    const waiting = await post();
    expect(waiting.json.status).toBe('queued');
    await waitFor(() => releaseFirst !== undefined);
    await worker.kill('SIGKILL');
    // The slot frees on node A and is handed on there; the signal waits in the workflow's history.
    releaseFirst!();
    await waitFor(async () => (await api(urlB(), 'GET', `/v1/tasks/${waiting.json.task_id}`, { headers: client.auth })).json.status === 'assigned');
    worker = await spawnNode('worker', env, /temporal worker started/);
    for (const taskId of [running.json.task_id, waiting.json.task_id]) {
      const done = await waitFor(async () => {
        const response = await api(urlB(), 'GET', `/v1/tasks/${taskId}`, { headers: client.auth });
        return response.json.status === 'completed' ? response.json : undefined;
      }, 60_000);
      expect(done.attempts).toHaveLength(1);
    }
    expect(await getBalance(db, client.account_id)).toMatchObject({ available_points: '46', held_points: '0', lifetime_spent_points: '4' });
    expect((await getBalance(db, solver.solverId))?.available_points).toBe('3.6');
    await solver.close();
  }, 120_000);

  test('tasks created alternately on the two API processes while one slot serves them are served in creation order', async () => {
    const served: string[] = [];
    // One slot, a short task each: slots free on node A while the next tasks are being created, on A or on B.
    const solver = await FakeSolver.start(urlA(), {
      price: '1',
      taskTypes: ['screenshot'],
      maxConcurrent: 1,
      behaviour: (frame, self) => {
        served.push(frame.task_id);
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        setTimeout(() => self.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS.screenshot(frame.payload) }), 20 + Math.random() * 40);
      },
    });
    const client = await registerAccount(urlA(), '100');
    const created: string[] = [];
    const statuses = new Set<string>();
    for (let i = 0; i < 24; i++) {
      const node = i % 2 === 0 ? urlA() : urlB();
      const response = await api(node, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'screenshot', payload: { url: `https://example.com/order/${i}` }, max_price_points: 1 } });
      expect(response.status).toBe(200);
      created.push(response.json.task_id);
      statuses.add(response.json.status);
    }
    // Under contention: some tasks found the slot free, others waited in line behind earlier ones.
    expect(statuses).toContain('queued');
    // A wait that runs out still compares the orders, which says more than the timeout.
    await waitFor(() => served.length === created.length || undefined, 30_000).catch(() => undefined);
    expect(served).toEqual(created);
    for (const taskId of created) {
      await waitFor(async () => (await api(urlB(), 'GET', `/v1/tasks/${taskId}`, { headers: client.auth })).json.status === 'completed');
    }
    expect(await getBalance(db, client.account_id)).toMatchObject({ available_points: '76', held_points: '0', lifetime_spent_points: '24' });
    await solver.close();
  }, 120_000);

  test('when the node holding a solver dies, its attempt is reassigned to a solver on another node', async () => {
    const doomedNode = await spawnNode('api', { ...env, PORT: '0', NODE_ID: `node-c-${env.TEMPORAL_TASK_QUEUE}` }, /api listening/);
    await waitFor(() => watched(doomedNode));
    const stranded = await FakeSolver.start(urlOf(doomedNode), { price: '1', behaviour: 'accept_then_silent' });
    const survivor = await FakeSolver.start(urlA(), { price: '2' });
    const client = await registerAccount(urlB(), '50');
    const created = await api(urlB(), 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/n' } } });
    await waitFor(() => stranded.received.length === 1);
    await doomedNode.kill('SIGKILL');
    const done = await waitFor(async () => {
      const response = await api(urlB(), 'GET', `/v1/tasks/${created.json.task_id}`, { headers: client.auth });
      return ['completed', 'failed', 'timed_out'].includes(response.json.status) ? response.json : undefined;
    }, 60_000);
    expect(done.status).toBe('completed');
    expect(done.solver_id).toBe(survivor.solverId);
    expect(done.attempts[0]).toMatchObject({ solver_id: stranded.solverId, outcome: 'lost' });
    // Lost as the worker saw the node's sessions end, not when the dispatch activity's heartbeat lapsed.
    expect(await lostBecause(created.json.task_id)).toMatch(/holding the solver's socket is gone/);
    await survivor.close();
    // Otherwise it would look alive for a few more seconds, and its cheaper solver would get the next test's task.
    await forgetNode(doomedNode);
  }, 120_000);

  /**
   * An honest solver whose node goes away mid-attempt (killed, or shut down) reconnects to node B; the
   * attempt lost with the node is retried on it, and nothing of the loss is counted against it.
   */
  test.each([
    ['killed (SIGKILL)', 'SIGKILL', 'node_unavailable'],
    ['shut down (SIGTERM)', 'SIGTERM', 'node_shutdown'],
  ] as const)('the node holding an honest solver\'s socket %s mid-attempt: the solver, reconnected to another node, completes the task and loses no score', async (_name, signal, lostAs) => {
    const node = await spawnNode('api', { ...env, PORT: '0', NODE_ID: `node-${signal.toLowerCase()}-${env.TEMPORAL_TASK_QUEUE}` }, /api listening/);
    await waitFor(() => watched(node));
    // The first task is held (the attempt in flight when its node goes); every later one is answered.
    const solver = await FakeSolver.start(urlOf(node), {
      price: '2',
      taskTypes: ['proxy_fetch'],
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        if (self.received.length > 1) self.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS.proxy_fetch(frame.payload) });
      },
    });
    const client = await registerAccount(urlB(), '50');
    const created = await api(urlB(), 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: `https://example.com/lost-${signal}` }, timeout_seconds: 120 } });
    expect(created.status).toBe(200);
    await waitFor(() => solver.received.length === 1);
    await node.kill(signal);
    // The solver reconnects, with its key, to a node that is up.
    await solver.connect(urlB());
    const done = await waitFor(async () => {
      const response = await api(urlB(), 'GET', `/v1/tasks/${created.json.task_id}`, { headers: client.auth });
      return ['completed', 'failed', 'timed_out'].includes(response.json.status) ? response.json : undefined;
    }, 90_000);
    expect(done).toMatchObject({ status: 'completed', solver_id: solver.solverId });
    expect(done.attempts.map((attempt: { solver_id: string; outcome: string }) => [attempt.solver_id, attempt.outcome])).toEqual([
      [solver.solverId, 'lost'],
      [solver.solverId, 'completed'],
    ]);
    // Killed, its sessions ended with it; shut down, it ended its own attempts first.
    if (signal === 'SIGKILL') expect(await lostBecause(created.json.task_id)).toMatch(/holding the solver's socket is gone/);
    const auth = { Authorization: `Bearer ${solver.apiKey}` };
    const attempts = await api(urlB(), 'GET', '/v1/solver/attempts', { headers: auth });
    expect(attempts.json.data.map((attempt: { outcome: string; error: { type?: string } | null }) => [attempt.outcome, attempt.error?.type ?? null])).toEqual([
      ['completed', null],
      ['lost', lostAs],
    ]);
    // Its record: one attempt, completed; nothing failed, its success rate whole, its reputation untouched by the loss.
    const stats = await api(urlB(), 'GET', '/v1/solver/stats', { headers: auth });
    expect(stats.json).toMatchObject({ attempts: 1, completed: 1, failed: 0, success_rate: 1 });
    expect(stats.json.trust.reputation).toEqual([expect.objectContaining({ task_type: 'proxy_fetch', successes: 1, failures: 0 })]);
    expect((await getBalance(db, solver.solverId))?.available_points).toBe('1.8');
    await solver.close();
    await forgetNode(node).catch(() => undefined);
  }, 150_000);

  test('a node that loses only its presence connection mid-attempt is not taken for gone: the attempt completes', async () => {
    // The result comes 3 s after the task: the connection is cut while the attempt runs.
    const solver = await FakeSolver.start(urlA(), {
      price: '1',
      taskTypes: ['proxy_fetch'],
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        setTimeout(() => self.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS.proxy_fetch(frame.payload) }), 3000);
      },
    });
    const client = await registerAccount(urlB(), '50');
    const created = await api(urlB(), 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/cut' } } });
    expect(created.status).toBe(200);
    await waitFor(() => solver.received.length === 1);
    // Node A's presence (its one advisory lock) is held by a connection of its own; the node lives on.
    const nodeA = listening(apiA).node_id;
    const cut = await db.oneFirst(sql.type(z.object({ cut: z.number() }))`
      SELECT count(pg_terminate_backend(l.pid))::int AS cut FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.granted AND s.datname = current_database() AND s.application_name = ${nodeSessionName(nodeA)}`);
    expect(cut).toBe(1);
    const done = await waitFor(async () => {
      const response = await api(urlB(), 'GET', `/v1/tasks/${created.json.task_id}`, { headers: client.auth });
      return ['completed', 'failed', 'timed_out'].includes(response.json.status) ? response.json : undefined;
    }, 60_000);
    expect(done).toMatchObject({ status: 'completed', solver_id: solver.solverId });
    expect(done.attempts).toEqual([expect.objectContaining({ solver_id: solver.solverId, outcome: 'completed' })]);
    // Still listed, and its presence held again.
    expect(await db.exists(sql.unsafe`SELECT 1 FROM api_nodes WHERE node_id = ${nodeA}`)).toBe(true);
    await waitFor(() =>
      db.exists(sql.unsafe`
        SELECT 1 FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.granted AND s.datname = current_database() AND s.application_name = ${nodeSessionName(nodeA)}`),
    );
    await solver.close();
  }, 120_000);

  test('an API node asked to stop finishes its requests in flight, takes no new connections and exits cleanly', async () => {
    const leaving = await spawnNode('api', { ...env, PORT: '0', NODE_ID: `node-d-${env.TEMPORAL_TASK_QUEUE}` }, /api listening/);
    let release: (() => void) | undefined;
    const solver = await FakeSolver.start(urlOf(leaving), {
      price: '2',
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        release = () => self.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS[frame.task_type](frame.payload) });
      },
    });
    const client = await registerAccount(urlA(), '50');
    const answer = api(urlOf(leaving), 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/drain' } });
    await waitFor(() => release !== undefined);
    const exited = new Promise<number | null>((resolve) => leaving.child.once('exit', (code) => resolve(code)));
    // The signal finds the server busy (here paused for a moment), as it may be under load: it must still
    // drain, and nothing between the terminal and the server may kill it for being slow to react.
    const server = listening(leaving).pid;
    process.kill(server, 'SIGSTOP');
    process.kill(-leaving.child.pid!, 'SIGTERM');
    await new Promise((resolve) => setTimeout(resolve, 500));
    process.kill(server, 'SIGCONT');
    // The listener closes at once; the request in flight is still served.
    await waitFor(async () => (await fetch(`${urlOf(leaving)}/health`).then(() => false, () => true)) || undefined);
    release!();
    const fetched = await answer.catch((error) => {
      throw new Error(`the request in flight failed (${error.cause ?? error}); the node printed:\n${leaving.output.join('')}`);
    });
    expect(fetched.status).toBe(200);
    expect(fetched.json.content).toBe('# Hello');
    expect(await exited).toBe(0);
    const problems = leaving.output.join('').split('\n').filter((line) => /"level":(40|50|60)/.test(line));
    expect(problems).toEqual([]);
    await solver.close();
  }, 120_000);

  test('a chat whose solver node dies before the first token is answered in full by a solver on another node', async () => {
    const doomedNode = await spawnNode('api', { ...env, PORT: '0', NODE_ID: `node-d-${env.TEMPORAL_TASK_QUEUE}` }, /api listening/);
    await waitFor(() => watched(doomedNode));
    const stranded = await FakeSolver.start(urlOf(doomedNode), { behaviour: 'accept_then_silent', capabilities: strongChat({ min: '1' }) });
    const words = ['answered ', 'in ', 'full'];
    const survivor = await FakeSolver.start(urlA(), { behaviour: talker(words), capabilities: strongChat({ min: '2' }) });
    const client = await registerAccount(urlB(), '500');
    const response = fetch(`${urlB()}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...client.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'service/strong', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
    await waitFor(() => stranded.received.length === 1);
    await doomedNode.kill('SIGKILL');
    // The lost attempt's node never reports; the workflow learns from the client's node that no delta
    // reached the client, and gives the chat to the other solver.
    const text = await (await response).text();
    const events = text.split('\n\n').filter((line) => line.startsWith('data: ')).map((line) => line.slice(6));
    expect(events.at(-1)).toBe('[DONE]');
    const content = events.slice(0, -1).map((event) => JSON.parse(event).choices[0]?.delta?.content ?? '').join('');
    expect(content).toBe(words.join(''));
    expect(survivor.received).toHaveLength(1);
    const spent = await getBalance(db, client.account_id);
    expect(spent).toMatchObject({ held_points: '0' });
    expect(Number(spent?.lifetime_spent_points)).toBeGreaterThan(0);
    await survivor.close();
  }, 120_000);
});
