import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FakeSolver, strongChat, talker } from './support/fake-solver';
import { answeredType, HOSTILE_CASES, sendHostile } from './support/hostile-inputs';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Schemathesis (PyPI, installed into .tools/ by scripts/ensure-tools.mjs --schemathesis) fuzzes the
 * served /openapi.json of a real stack, with positive and negative data, and fails on any 5xx, any
 * status the document does not declare and any answer that does not match its schema or headers.
 * FUZZ_MAX_EXAMPLES (per operation) and FUZZ_MAX_SECONDS bound it; docs/testing.md gives the figures.
 */

const ROOT = path.resolve(__dirname, '..');
const ST = path.join(ROOT, '.tools', 'bin', 'st');
const MAX_EXAMPLES = Number(process.env.FUZZ_MAX_EXAMPLES ?? 25);
const MAX_SECONDS = Number(process.env.FUZZ_MAX_SECONDS ?? 60);
const SEED = process.env.FUZZ_SEED ?? '26';

function runSchemathesis(args: string[], cwd: string, env: Record<string, string>, timeoutMs: number): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    // Its own process group, so a timeout stops it and its workers together.
    const child = spawn(ST, args, { cwd, env: { ...process.env, ...env, NO_COLOR: '1', SCHEMATHESIS_TELEMETRY: 'false' }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const output: string[] = [];
    child.stdout.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output: output.join('') });
    });
  });
}

describe('schemathesis against the served OpenAPI document', () => {
  let stack: TestStack;
  const solvers: FakeSolver[] = [];
  let reportDir: string;

  beforeAll(async () => {
    execFileSync(process.execPath, [path.join(ROOT, 'scripts', 'ensure-tools.mjs'), '--schemathesis'], { stdio: 'inherit' });
    // The fuzzer sends thousands of requests a minute with one key; every web task type and chat has a
    // solver that answers at once, so no answer is a 503 for want of one.
    stack = await startTestStack({ env: { RATE_LIMIT_PER_MINUTE: '1000000', ACCEPT_TIMEOUT_MS: '5000', ATTEMPT_TIMEOUT_SECONDS: '20' } });
    solvers.push(await FakeSolver.start(stack.url, { maxConcurrent: 64 }));
    const chat = await FakeSolver.start(stack.url, { capabilities: strongChat({ billing: 'per_request' }) });
    chat.behaviour = talker(['fuzz', 'ed']);
    solvers.push(chat);
    reportDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fuzz-report-'));
  }, 180_000);
  afterAll(async () => {
    await Promise.all(solvers.map((solver) => solver.close()));
    await stack?.close();
  });

  test('no 5xx, no undocumented status, every answer matches the document', async () => {
    const client = await registerAccount(stack.url, '1000000000');
    // Identifiers that exist, so the id-taking routes are exercised past their 404: a task of the
    // fuzzing account, and another account for the admin routes (a simulated rate limit on the
    // fuzzing account itself would turn the rest of the run into 429s: the hooks send such a call to
    // the other account, test/support/schemathesis_hooks.py).
    const task = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'fuzz' } } });
    const target = await registerAccount(stack.url);
    const config = path.join(reportDir, 'schemathesis.toml');
    fs.writeFileSync(
      config,
      [
        `hooks = ${JSON.stringify(path.join(__dirname, 'support', 'schemathesis_hooks.py'))}`,
        `[dictionaries.tasks]`,
        `values = [${JSON.stringify(task.json.task_id)}]`,
        `[dictionaries.accounts]`,
        `values = [${JSON.stringify(target.account_id)}]`,
        `[parameters]`,
        `"path.task_id" = { dictionary = "tasks", probability = 0.5 }`,
        `"body.account_id" = { dictionary = "accounts", probability = 0.5 }`,
        `"body.solver_id" = { dictionary = "accounts", probability = 0.5 }`,
        // What schemathesis infers from 422 messages (a url_parsing answer read as `format: uri`) is not
        // the document: the run judges the document's own constraints.
        `[phases.fuzzing.error-feedback]`,
        `enabled = false`,
        // A schema-violating body over the body limit is refused by its size before its content: 413
        // payload_too_large is that refusal (schemathesis's default list of refusals lacks it).
        `[checks.negative_data_rejection]`,
        `expected-statuses = ${JSON.stringify(['400', '401', '403', '404', '405', '406', '409', '413', '415', '422', '428', '429'])}`,
        '',
      ].join('\n'),
    );
    const ndjson = path.join(reportDir, 'events.ndjson');
    const { code, output } = await runSchemathesis(
      [
        '--config-file', config,
        'run',
        `${stack.url}/openapi.json`,
        '--checks', 'all',
        // Valid by the schema yet refused by a rule it cannot state (a payload's fields per task_type, the
        // strong-tier allowlist, a URL WHATWG cannot parse): those 4xx are documented, not failures.
        '--exclude-checks', 'positive_data_acceptance',
        '--mode', 'all',
        '--phases', 'examples,coverage,fuzzing',
        '--max-examples', String(MAX_EXAMPLES),
        '--max-time', String(MAX_SECONDS),
        '--seed', SEED,
        '--workers', '2',
        '--request-timeout', '30',
        '--suppress-health-check', 'all',
        '--generation-database', 'none',
        '--no-color',
        '-H', `Authorization: Bearer ${client.api_key}`,
        '-H', `X-Admin-API-Key: ${ADMIN_KEY}`,
        '--report', 'ndjson',
        '--report-ndjson-path', ndjson,
      ],
      // Its replay files land beside the report, not in the repository.
      reportDir,
      { FUZZ_OWN_ACCOUNT: client.account_id, FUZZ_OTHER_ACCOUNT: target.account_id },
      (MAX_SECONDS + 120) * 1000,
    );
    // One status_code per response in the event log: how many requests, and what they were answered.
    const statuses = fs.existsSync(ndjson) ? [...fs.readFileSync(ndjson, 'utf8').matchAll(/"status_code":\s*(\d+)/g)].map((match) => match[1]) : [];
    const byStatus = Object.entries(statuses.reduce<Record<string, number>>((counts, status) => ({ ...counts, [status]: (counts[status] ?? 0) + 1 }), {}));
    process.stdout.write(`schemathesis: exit ${code}, ${statuses.length} requests (${byStatus.map(([status, n]) => `${status}: ${n}`).join(', ')})\n${output.split('\n').slice(-12).join('\n')}\n`);
    if (code !== 0) throw new Error(`schemathesis found problems (exit ${code}); its event log is ${ndjson}:\n${output}`);
    fs.rmSync(reportDir, { recursive: true, force: true });
  }, (MAX_SECONDS + 300) * 1000);

  // Inputs a generator from the document does not make (test/support/hostile-inputs.ts), on the same stack.
  test('explicit cases: each hostile input is a 4xx of its documented type', async () => {
    const client = await registerAccount(stack.url, '100');
    const answers = [];
    for (const hostile of HOSTILE_CASES) {
      const answer = await sendHostile(stack.url, hostile, { accountId: client.account_id, apiKey: client.api_key, adminKey: ADMIN_KEY });
      answers.push({ name: hostile.name, status: answer.status, type: answeredType(answer) });
    }
    expect(answers).toEqual(HOSTILE_CASES.map((hostile) => ({ name: hostile.name, status: hostile.status, type: hostile.type })));
  }, 60_000);
});
