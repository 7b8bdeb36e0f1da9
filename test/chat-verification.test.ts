import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { CHAT_VERIFICATION_SPRT } from '../src/trust/chat-agreement';
import { sprtStep, sprtThresholds } from '../src/trust/sprt';
import { honestAnswer } from './support/chat-answers';
import { strongChat, suiteSolvers, talker, waitFor, type FakeSolver, type TaskFrame } from './support/fake-solver';
import { parsePrometheusText, sampleValue } from './support/prometheus-text';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Verified client chats (docs/trust.md, "Verified client chats"): every sampled client chat is run
 * twice more by a verifier of the model that served it, and the three answers tell which is the odd
 * one out. A solver whose answers are not the model's is quarantined by the chat test; an honest one,
 * deterministic or sampling, is not; without a verifier of its model nothing is judged.
 */

jest.setTimeout(300_000);

let stack: TestStack;
const admin = { 'X-Admin-API-Key': ADMIN_KEY };
const AUDIT_EXACT = { accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 };

beforeAll(async () => {
  // Every client chat is verified; no audits, so that only verification judges the solvers here.
  stack = await startTestStack({
    env: {
      VERIFICATION_START_FRACTION: '1',
      REDUNDANT_RUN_FRACTION: '1',
      TRUST_PROBATION_CANARIES: '0',
      CANARY_EVERY_TASKS: '0',
      CANARY_SWEEP_SECONDS: '3600',
      REDUNDANT_RUN_SWEEP_SECONDS: '3600',
      RATE_LIMIT_PER_MINUTE: '100000',
      // Pay is held a day: a confirmed quarantine refunds the clients of the chats it was held for.
      EARNINGS_VESTING_SECONDS: '86400',
    },
  });
  const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '100000' }, headers: admin });
  expect(funded.status).toBe(200);
});
afterAll(async () => {
  await stack.close();
});
const startSolver = suiteSolvers(() => stack.url);

/** A strong model that answers what it is asked, the same way every time (test/support/chat-answers.ts). */
function answers(frame: TaskFrame, self: FakeSolver, reply = honestAnswer(frame.payload as Record<string, any>)) {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  reply.deltas.forEach((delta) => self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta }));
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: 'stop', usage: reply.usage } });
}

/** A model that samples: one of three answers of different words, at random, for every request. */
const SAMPLED = ['The harbour opens at nine.', 'Ferries leave the quay every hour.', 'Ask the lighthouse keeper tomorrow.'];
function samples(frame: TaskFrame, self: FakeSolver) {
  const text = SAMPLED[Math.floor(Math.random() * SAMPLED.length)]!;
  answers(frame, self, { deltas: [{ content: text }], usage: { prompt_tokens: 12, completion_tokens: 8, total_tokens: 20 } });
}

/** Odd answers of the client's in a row that quarantine (CHAT_VERIFICATION_SPRT). */
const FAILURES = Array.from({ length: 40 }, (_, i) => i + 1).find((n) => {
  let llr = 0;
  for (let i = 0; i < n; i++) llr = sprtStep(llr, true, CHAT_VERIFICATION_SPRT).llr;
  return llr >= sprtThresholds(CHAT_VERIFICATION_SPRT).upper;
})!;

/** Claims gpt-4o, answers everything with the same line (a cheaper model, or none at all). */
const parrot = talker(['I am a ', 'helpful model'], { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 });

const markVerifier = async (solver: FakeSolver) => {
  const marked = await api(stack.url, 'POST', `/v1/admin/solvers/${solver.solverId}/verifier`, { body: { verifier: true }, headers: admin });
  expect(marked.json).toEqual({ solver_id: solver.solverId, verifier: true });
};
const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;

const RunRow = z.object({
  task_id: z.string(),
  status: z.string(),
  concluded: z.boolean(),
  second_solver_id: z.string().nullable(),
  third_solver_id: z.string().nullable(),
  model_name: z.string().nullable(),
  client_answer: z.record(z.any()).nullable(),
  evidence: z.record(z.any()).nullable(),
});
const concluded = (taskId: string) =>
  waitFor(async () => {
    const run = await stack.db.maybeOne(sql.type(RunRow)`
      SELECT task_id, status, concluded_at IS NOT NULL AS concluded, second_solver_id, third_solver_id, model_name, client_answer, evidence
      FROM redundant_runs WHERE task_id = ${taskId}`);
    return run && (run.concluded || ['skipped', 'unanswered', 'incomparable'].includes(run.status)) ? run : null;
  }, 60_000);

/** One client chat; its task id and the solver that served it. */
async function clientChat(client: { account_id: string; auth: Record<string, string> }, content: string) {
  const response = await api(stack.url, 'POST', '/v1/chat/completions', { body: { model: 'strong', messages: [{ role: 'user', content }], temperature: 0.7 }, headers: client.auth });
  expect(response.status).toBe(200);
  const { task_id: taskId, solver_id: solverId } = await stack.db.one(sql.type(z.object({ task_id: z.string(), solver_id: z.string() }))`
    SELECT task_id, solver_id FROM tasks WHERE account_id = ${client.account_id} ORDER BY created_at DESC LIMIT 1`);
  return { taskId, solverId, content: response.json.choices[0].message.content as string };
}

test('an honest solver beside a verifier: each chat is run twice more, all three answers agree, and nothing is held against it', async () => {
  const verifier = await startSolver({ behaviour: answers, capabilities: strongChat({ min: '3' }) });
  await markVerifier(verifier);
  const solver = await startSolver({ behaviour: answers, capabilities: strongChat() });
  const client = await registerAccount(stack.url, '200');
  for (let i = 0; i < 4; i++) {
    const chat = await clientChat(client, `What is ${12 + i} times ${34 + i}?`);
    expect(chat.solverId).toBe(solver.solverId);
    const run = await concluded(chat.taskId);
    expect(run).toMatchObject({ status: 'agreed', second_solver_id: verifier.solverId, third_solver_id: verifier.solverId, model_name: 'gpt-4o' });
    // The answer kept is the one the client was streamed.
    expect(run.client_answer?.message?.content).toBe(chat.content);
    expect(run.evidence).toMatchObject({ triad: 'all_agree', similarity_to_first_check: 1 });
  }
  const trust = await trustOf(solver.solverId);
  expect(trust.quarantined).toBe(false);
  const chat = trust.reputation.find((row: { task_type: string }) => row.task_type === 'chat_completion');
  expect(chat).toMatchObject({ redundant_runs: 4, disagreements: 0, verified_passes: 4, verified_failures: 0 });
  expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
});

test('a solver whose model samples, beside a verifier of the same model, is the odd one out only by chance and is not quarantined', async () => {
  const verifier = await startSolver({ behaviour: samples, capabilities: strongChat({ min: '3' }) });
  await markVerifier(verifier);
  const solver = await startSolver({ behaviour: samples, capabilities: strongChat() });
  const client = await registerAccount(stack.url, '300');
  const triads: string[] = [];
  for (let i = 0; i < 12; i++) {
    const chat = await clientChat(client, `Tell me about the harbour, please (${i}).`);
    expect(chat.solverId).toBe(solver.solverId);
    triads.push((await concluded(chat.taskId)).evidence?.triad);
  }
  // Each of the three answers is the odd one out as often: the client's is not singled out.
  expect(triads.every((triad) => ['client_odd', 'check_odd', 'all_agree', 'undecided'].includes(triad))).toBe(true);
  expect((await trustOf(solver.solverId)).quarantined).toBe(false);
});

test('a solver that answers every chat with the same line is the odd one out each time and is quarantined by the chat test', async () => {
  const verifier = await startSolver({ behaviour: answers, capabilities: strongChat({ min: '3' }) });
  await markVerifier(verifier);
  const cheat = await startSolver({ behaviour: parrot, capabilities: strongChat() });
  const client = await registerAccount(stack.url, '300');
  let served = 0;
  for (let i = 0; i < FAILURES + 3 && !(await trustOf(cheat.solverId)).quarantined; i++) {
    const chat = await clientChat(client, `What is ${40 + i} times ${7 + i}?`);
    if (chat.solverId !== cheat.solverId) break;
    served++;
    const run = await concluded(chat.taskId);
    expect(run).toMatchObject({ status: 'disagreed', concluded: true });
    expect(run.evidence).toMatchObject({ triad: 'client_odd', first: { solver_id: cheat.solverId, excerpt: 'I am a helpful model' } });
  }
  expect(served).toBe(FAILURES);
  const trust = await trustOf(cheat.solverId);
  expect(trust.quarantined).toBe(true);
  expect(trust.quarantines[0]).toMatchObject({ reason: 'verification_failed', task_type: 'chat_completion' });
  expect(trust.quarantines[0].evidence.sprt).toMatchObject({ test: 'chat', verified_failures: FAILURES, verified_passes: 0 });
  const metrics = parsePrometheusText(await (await fetch(`${stack.url}/metrics`, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } })).text());
  expect(sampleValue(metrics, 'marketplace_chat_verifications_concluded', { model: 'gpt-4o', outcome: 'client_odd' })).toBeGreaterThanOrEqual(FAILURES);
  // No single answer is proof: nothing was refunded by a verdict.
  const refunds = await stack.db.oneFirst(sql.type(z.object({ n: z.number() }))`
    SELECT count(*)::int AS n FROM ledger_entries WHERE idempotency_key LIKE 'refund:%'`);
  expect(refunds).toBe(0);
  // An operator who confirms the quarantine refunds every chat the cheat served: its pay was held.
  const confirmed = await api(stack.url, 'POST', `/v1/admin/solvers/${cheat.solverId}/quarantine/confirm`, { body: { note: 'not the model it claims' }, headers: admin });
  expect(confirmed.status).toBe(200);
  expect(confirmed.json.refunded_tasks).toBe(FAILURES);
  expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '300', held_points: '0', lifetime_spent_points: '0' });
  expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
});

test('without a verifier of the model that served the chat, the run is skipped and nobody is judged', async () => {
  const verifier = await startSolver({ behaviour: answers, capabilities: strongChat({ min: '3', model: 'gpt-4.1' }) });
  await markVerifier(verifier);
  const solver = await startSolver({ behaviour: parrot, capabilities: strongChat() });
  const client = await registerAccount(stack.url, '100');
  const chat = await clientChat(client, 'What is 3 times 4?');
  expect(chat.solverId).toBe(solver.solverId);
  expect(await concluded(chat.taskId)).toMatchObject({ status: 'skipped', second_solver_id: null });
  const trust = await trustOf(solver.solverId);
  expect(trust.quarantined).toBe(false);
});

test('a verifier that cannot answer, or answers nothing, costs the solver nothing', async () => {
  let calls = 0;
  // The first check fails upstream; the next client chat's checks answer with no words.
  const flaky = (frame: TaskFrame, self: FakeSolver) => {
    self.send({ type: 'accept', attempt_id: frame.attempt_id });
    if (calls++ === 0) {
      self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'upstream_error', message: 'upstream down' }, retryable: false });
      return;
    }
    self.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: 'stop', usage: { prompt_tokens: 5, completion_tokens: 0, total_tokens: 5 } } });
  };
  const verifier = await startSolver({ behaviour: flaky, capabilities: strongChat({ min: '3' }) });
  await markVerifier(verifier);
  const solver = await startSolver({ behaviour: answers, capabilities: strongChat() });
  const client = await registerAccount(stack.url, '100');
  const first = await clientChat(client, 'What is 6 times 7?');
  expect(first.solverId).toBe(solver.solverId);
  expect(await concluded(first.taskId)).toMatchObject({ status: 'unanswered' });
  const second = await clientChat(client, 'What is 8 times 9?');
  const run = await concluded(second.taskId);
  expect(run).toMatchObject({ status: 'incomparable' });
  expect(run.evidence).toMatchObject({ incomparable: 'check_empty' });
  const trust = await trustOf(solver.solverId);
  expect(trust.quarantined).toBe(false);
  expect(trust.reputation.find((row: { task_type: string }) => row.task_type === 'chat_completion')).toMatchObject({ verified_failures: 0 });
});
