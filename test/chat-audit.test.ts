import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, balanceFromEntries, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { SolverTrust } from '../src/schemas/responses';
import { auditTest, EXPECTED_AUDIT_PASS_RATE, nearQuarantine } from '../src/trust/chat-audit';
import { modelAnswer } from './support/chat-answers';
import { clientChatBody } from './support/client-chats';
import { classifierAccuracy, features } from './support/shape-classifier';
import { FakeSolver, strongChat, suiteSolvers, talker, waitFor, type TaskFrame } from './support/fake-solver';
import { parsePrometheusText, sampleValue } from './support/prometheus-text';
import { canariesSettled, canaryCounts } from './support/trust';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Chat audits (docs/trust.md, "Chat audits"): a strong-tier chat solver that answers audit prompts
 * wrongly is quarantined by the sequential test after a few failed audits and gets no client chat after;
 * an honest one passes every audit over many chats, and its audits reach it as client chats do; the
 * platform account alone pays for audits.
 */

let stack: TestStack;
const admin = { 'X-Admin-API-Key': ADMIN_KEY };
jest.setTimeout(240_000);

/** A stack with this trust policy for the tests of one describe block (the policy is per process). */
function stackWith(env: Record<string, string>) {
  beforeAll(async () => {
    stack = await startTestStack({ env });
    // Audits are paid from the platform's own points (each held at a client's default chat cap, 100).
    const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '1000' }, headers: admin });
    expect(funded.status).toBe(200);
  });
  afterAll(async () => {
    await stack.close();
  });
  return suiteSolvers(() => stack.url);
}

/** Failed audits in a row from a fresh start that quarantine (AUDIT_SPRT). */
const FAILURES = Array.from({ length: 20 }, (_, i) => i + 1).find((n) => auditTest(Array(n).fill(false)).decision === 'quarantine')!;

/** When each task's frame reached the solver (ms), by task id. */
const receivedAt = new Map<string, number>();

/** A strong-tier solver whose model answers what it is asked, audits included (test/support/chat-answers.ts). */
async function honest(frame: TaskFrame, self: FakeSolver) {
  receivedAt.set(frame.task_id, Date.now());
  const answer = await modelAnswer(stack.db, frame.task_id, frame.payload);
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  answer.deltas.forEach((delta) => self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta }));
  const finishReason = answer.deltas[0]?.tool_calls ? 'tool_calls' : 'stop';
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: finishReason, usage: answer.usage, model: 'gpt-4o' } });
}

/** Claims gpt-4o, answers everything with the same line (a cheaper model, or none at all). */
const parrot = talker(['I am a ', 'helpful model'], { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 });

const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;
const chatOf = (trust: { reputation: { task_type: string }[] }) => trust.reputation.find((row) => row.task_type === 'chat_completion') as Record<string, any> | undefined;

const chat = (auth: Record<string, string>) =>
  api(stack.url, 'POST', '/v1/chat/completions', { body: { model: 'strong', messages: [{ role: 'user', content: 'Say hello.' }], temperature: 0 }, headers: auth });

const auditsSettled = (solverId: string) => canariesSettled(stack.db, solverId);

const countsOf = (solverId: string) => canaryCounts(stack.db, solverId, 'chat_completion');

/** Attempts the API node sent as it handed their task a freed slot, then taken over by their activity. */
const handedEarly = async () => {
  const response = await fetch(`${stack.url}/metrics`, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } });
  return sampleValue(parsePrometheusText(await response.text()), 'marketplace_early_attempts_total', { occasion: 'handed', end: 'taken_over' });
};

const auditTaskIds = async (solverId: string) =>
  new Set(await stack.db.anyFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM canaries WHERE solver_id = ${solverId}`));

describe('with probation', () => {
  const startSolver = stackWith({ TRUST_PROBATION_CANARIES: '1', CANARY_EVERY_TASKS: '3' });

  test(`a solver that answers audits wrongly is quarantined by its ${FAILURES}th audit, before any client chat, and gets none after`, async () => {
    const cheat = await startSolver({ behaviour: parrot, capabilities: strongChat() });
    const trust = await waitFor(async () => {
      const found = await trustOf(cheat.solverId);
      return found.quarantined ? found : null;
    }, 60_000);
    // On probation: the audits were the only tasks it was ever sent; each failure sent the next at once.
    expect(cheat.received).toHaveLength(FAILURES);
    expect(cheat.received.every((frame) => frame.task_type === 'chat_completion' && frame.payload.model === 'service/strong')).toBe(true);
    const [quarantine] = trust.quarantines;
    expect(quarantine).toMatchObject({ reason: 'chat_audit_failed', task_type: 'chat_completion', cleared_at: null });
    expect(quarantine.evidence).toMatchObject({ failed_audits: FAILURES, judged_audits: FAILURES, expected_pass_rate: EXPECTED_AUDIT_PASS_RATE, usage: { prompt_tokens: 12 } });
    expect(quarantine.evidence.llr).toBeGreaterThanOrEqual(quarantine.evidence.threshold);
    expect(quarantine.evidence.returned_excerpt).toBe('I am a helpful model');
    expect(quarantine.evidence.problems.length).toBeGreaterThan(0);
    expect(chatOf(trust)).toMatchObject({ canary_failures: FAILURES, canary_passes: 0, client_work: false });
    // The quarantining audit's payout is held (1 + 2 × 17 / 1000, less the 10 % fee); the first one's was settled before.
    expect(trust).toMatchObject({ held_points: '0.9306', held_tasks: 1 });

    // No client chat reaches it.
    const client = await registerAccount(stack.url, '500');
    const refused = await chat(client.auth);
    expect(refused.status).not.toBe(200);
    expect(refused.json.error.type).toBe('no_strong_solver_available');
    expect(cheat.received).toHaveLength(FAILURES);
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test('an honest solver passes every audit over many chats and is never quarantined; the platform alone pays for audits', async () => {
    const solver = await startSolver({ behaviour: honest, capabilities: strongChat() });
    // On probation until its first audit passes.
    await waitFor(async () => chatOf(await trustOf(solver.solverId))?.client_work === true, 60_000);
    const client = await registerAccount(stack.url, '1000');
    const CHATS = 30;
    for (let i = 0; i < CHATS; i++) {
      const answered = await chat(client.auth);
      expect(answered.status).toBe(200);
      // A due audit starts as the chat that made it due ends; each is let through before the next chat.
      await auditsSettled(solver.solverId);
    }
    const trust = await trustOf(solver.solverId);
    expect(trust.quarantined).toBe(false);
    expect(trust.held_points).toBe('0');
    // 1 on probation, then one every 1 to 5 chats (mean 3): at least 30 / 5 more.
    expect(chatOf(trust)!.canary_passes).toBeGreaterThanOrEqual(1 + CHATS / 5);
    expect(chatOf(trust)).toMatchObject({ canary_failures: 0, client_work: true });
    const audits = await auditTaskIds(solver.solverId);
    expect(solver.received).toHaveLength(CHATS + audits.size);
    // Every kind of audit was asked and judged with no problem found.
    const judged = await stack.db.any(sql.type(z.object({ kind: z.string(), problems: z.array(z.string()), verdict: z.string() }))`
      SELECT audit ->> 'kind' AS kind, audit -> 'problems' AS problems, verdict FROM canaries WHERE solver_id = ${solver.solverId}`);
    expect(judged.every((row) => row.verdict === 'passed' && row.problems.length === 0)).toBe(true);

    // On the wire an audit is a client's chat: the same frame fields, id form, attempt, deadline and
    // payload fields (the audits copy these clients' shape: one user message at temperature 0).
    // (Its probation audit came before any client chat: it has a shape of its own, defaultShape.)
    const firstClient = solver.received.findIndex((frame) => !audits.has(frame.task_id));
    const frames = solver.received.slice(firstClient).map((frame) => ({ frame, audit: audits.has(frame.task_id) }));
    const form = ({ frame }: (typeof frames)[number]) => ({
      fields: Object.keys(frame).sort().join(','),
      id: frame.task_id.replace(/_[0-9a-f]+$/, (hex) => `_${'x'.repeat(hex.length - 1)}`),
      attempt: frame.attempt_id.slice(frame.task_id.length),
      payload: Object.keys(frame.payload).sort().join(','),
      roles: (frame.payload.messages as { role: string }[]).map((message) => message.role).join(','),
      temperature: frame.payload.temperature,
    });
    const auditForms = new Set(frames.filter((entry) => entry.audit).map((entry) => JSON.stringify(form(entry))));
    const clientForms = new Set(frames.filter((entry) => !entry.audit).map((entry) => JSON.stringify(form(entry))));
    expect([...auditForms]).toEqual([...clientForms]);
    expect(JSON.parse([...auditForms][0]!)).toMatchObject({ id: `chat_${'x'.repeat(24)}`, attempt: '.a1' });
    // Deadlines: the chat's, from the moment the frame was sent, for both (within the test's clock and the send).
    const left = (entry: (typeof frames)[number]) => (Date.parse(entry.frame.deadline) - receivedAt.get(entry.frame.task_id)!) / 1000;
    for (const entry of frames) expect(Math.abs(left(entry) - stack.config.chatTimeoutSeconds)).toBeLessThan(5);

    // Audits are held and paid from the platform account only; the client paid for its own chats only.
    const payers = await stack.db.anyFirst(sql.type(z.object({ account_id: z.string() }))`
      SELECT DISTINCT e.account_id FROM ledger_entries e JOIN canaries k ON k.task_id = e.hold_id WHERE e.kind IN ('hold', 'capture')`);
    expect(payers).toEqual([PLATFORM_ACCOUNT_ID]);
    const clientSpent = await stack.db.oneFirst(sql.type(z.object({ spent: z.string() }))`
      SELECT trim_scale(sum(price_points))::text AS spent FROM tasks WHERE account_id = ${client.account_id}`);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: clientSpent, held_points: '0' });
    expect(await balanceFromEntries(stack.db, PLATFORM_ACCOUNT_ID)).toEqual(await getBalance(stack.db, PLATFORM_ACCOUNT_ID));
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test('the trust view and the metrics show a solver\'s audits per model: passed, failed, pass rate and where the sequential test stands, since its last clearing too', async () => {
    // Four failed audits (each sends the next at once), then a pass that ends its probation: no more audits.
    const MODEL = 'claude-opus-4-1';
    let audits = 0;
    const slipping = await startSolver({ behaviour: (frame: TaskFrame, self: FakeSolver) => (++audits <= 4 ? parrot : honest)(frame, self), capabilities: strongChat({ model: MODEL }) });
    const trust = await waitFor(async () => {
      const found = await trustOf(slipping.solverId);
      return found.chat_audits[0]?.passed === 1 ? found : null;
    }, 60_000);
    const expected = auditTest([false, false, false, false, true]);
    expect(expected).toMatchObject({ decision: 'continue', judged: 5, failed: 4 });
    expect(nearQuarantine(expected)).toBe(true);
    expect(trust.quarantined).toBe(false);
    // The answer is the one the OpenAPI document declares.
    expect(SolverTrust.safeParse(trust).error).toBeUndefined();
    expect(trust.chat_audits).toEqual([{ model: MODEL, passed: 1, failed: 4, pass_rate: 0.2, passed_since_clear: 1, failed_since_clear: 4, pass_rate_since_clear: 0.2 }]);
    expect(trust.chat_audit_test).toEqual({ ...expected, near_quarantine: true, expected_pass_rate: EXPECTED_AUDIT_PASS_RATE });
    // An account never audited has no audits and no test.
    expect(await trustOf((await registerAccount(stack.url)).account_id)).toMatchObject({ chat_audits: [], chat_audit_test: null });

    const metrics = async () => {
      const response = await fetch(`${stack.url}/metrics`, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } });
      return parsePrometheusText(await response.text());
    };
    const before = await metrics();
    expect(sampleValue(before, 'marketplace_chat_audits_judged', { model: MODEL, verdict: 'passed' })).toBe(1);
    expect(sampleValue(before, 'marketplace_chat_audits_judged', { model: MODEL, verdict: 'failed' })).toBe(4);
    expect(sampleValue(before, 'marketplace_chat_audit_solvers_near_quarantine', { model: MODEL })).toBe(1);
    expect(before.types.get('marketplace_chat_audit_solvers_near_quarantine')).toBe('gauge');

    // An admin's clearing (of a quarantine opened and cleared, written as clearQuarantine leaves it) starts the count again.
    await stack.db.query(sql.unsafe`
      INSERT INTO solver_quarantines (solver_id, task_type, reason, evidence, cleared_at, cleared_note)
      VALUES (${slipping.solverId}, 'chat_completion', 'chat_audit_failed', '{}'::jsonb, now(), 'a slip')`);
    const cleared = await trustOf(slipping.solverId);
    expect(cleared.chat_audits).toEqual([{ model: MODEL, passed: 1, failed: 4, pass_rate: 0.2, passed_since_clear: 0, failed_since_clear: 0, pass_rate_since_clear: null }]);
    expect(cleared.chat_audit_test).toMatchObject({ decision: 'continue', llr: 0, judged: 0, failed: 0, near_quarantine: false });
    const after = await metrics();
    expect(sampleValue(after, 'marketplace_chat_audits_judged', { model: MODEL, verdict: 'failed' })).toBe(4);
    expect(sampleValue(after, 'marketplace_chat_audit_solvers_near_quarantine', { model: MODEL })).toBe(0);
  });

  test('a standard-tier chat capability is not audited', async () => {
    const standard = await startSolver({ capabilities: strongChat().map((capability) => ({ ...capability, tier: 'standard' })), behaviour: honest });
    await new Promise((resolve) => setTimeout(resolve, 5000));
    expect(standard.received).toHaveLength(0);
  });
});

describe('without probation', () => {
  const EVERY = 3;
  const startSolver = stackWith({ TRUST_PROBATION_CANARIES: '0', CANARY_EVERY_TASKS: String(EVERY) });

  test(`a solver that answers audits wrongly serves at most ${2 * EVERY - 1} client chats before its ${FAILURES}th failed audit quarantines it, and none after`, async () => {
    const cheat = await startSolver({ behaviour: parrot, capabilities: strongChat() });
    const client = await registerAccount(stack.url, '500');
    let served = 0;
    for (;;) {
      const answered = await chat(client.auth);
      if (answered.status !== 200) {
        expect(answered.json.error.type).toBe('no_strong_solver_available');
        break;
      }
      served += 1;
      expect(served).toBeLessThanOrEqual(2 * EVERY - 1);
      await auditsSettled(cheat.solverId);
    }
    const trust = await trustOf(cheat.solverId);
    expect(trust.quarantined).toBe(true);
    expect(chatOf(trust)).toMatchObject({ canary_failures: FAILURES });
    expect(cheat.received).toHaveLength(served + FAILURES);
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test("an audit waiting for its solver's busy slot is sent by the node that hands it the slot, its deltas assembled, and an honest solver passes it", async () => {
    // Client chats ask "Say hello <i>."; the solver holds each until the test releases it, and answers audits at once.
    const isClient = (frame: TaskFrame) => /^Say hello/.test(String((frame.payload.messages as { content: string }[])[0]?.content));
    const held = new Map<string, () => void>();
    const solver = await startSolver({
      capabilities: strongChat().map((capability) => ({ ...capability, max_concurrent: 1 })),
      behaviour: async (frame, self) => {
        if (isClient(frame)) await new Promise<void>((resolve) => held.set(frame.task_id, resolve));
        await honest(frame, self);
      },
    });
    try {
      const client = await registerAccount(stack.url, '500');
      const ask = (i: number) =>
        api(stack.url, 'POST', '/v1/chat/completions', { body: { model: 'strong', messages: [{ role: 'user', content: `Say hello ${i}.` }], temperature: 0 }, headers: client.auth });
      const frameOf = (i: number) => waitFor(() => solver.received.find((frame) => (frame.payload.messages as { content: string }[])[0]?.content === `Say hello ${i}.`), 30_000);
      // Client chats one at a time until the next one to end makes the solver due an audit.
      for (let i = 0; ; i++) {
        expect(i).toBeLessThan(6 * EVERY);
        const counts = await countsOf(solver.solverId);
        if (counts && counts.since + 1 === counts.due) break;
        const pending = ask(i);
        const frame = await frameOf(i);
        await waitFor(() => held.has(frame.task_id));
        held.get(frame.task_id)!();
        expect((await pending).status).toBe(200);
        await auditsSettled(solver.solverId);
      }
      // A holds the only slot and B waits for it; A's end makes the solver due, hands its slot to B, and
      // the audit waits in the queue for the next one, with the strong-tier allowlist on its row.
      const a = ask(100);
      const frameA = await frameOf(100);
      await waitFor(() => held.has(frameA.task_id));
      const b = ask(101);
      // Client tasks only: an earlier test's quarantined solver may still have an audit waiting.
      await waitFor(async () => (await stack.db.anyFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM task_queue WHERE task_type = 'chat_completion' AND canary_for IS NULL`)).length === 1);
      const before = await handedEarly();
      held.get(frameA.task_id)!();
      const frameB = await frameOf(101);
      const waiting = await waitFor(() =>
        stack.db.maybeOne(sql.type(z.object({ task_id: z.string(), strong_models: z.array(z.string()).nullable() }))`
          SELECT q.task_id, q.strong_models FROM task_queue q JOIN canaries k USING (task_id) WHERE k.solver_id = ${solver.solverId}`),
      );
      expect(waiting.strong_models).toEqual(expect.arrayContaining(['gpt-4o']));
      await waitFor(() => held.has(frameB.task_id));
      // B was handed A's slot on this node, which serves its client: sent at once, then taken over.
      await waitFor(async () => (await handedEarly()) === before + 1);
      // B's end hands the slot to the audit, and this node, holding the solver's socket, sends it at once.
      held.get(frameB.task_id)!();
      await waitFor(() => solver.received.find((frame) => frame.task_id === waiting.task_id), 30_000, 20);
      const verdict = await waitFor(() =>
        stack.db.maybeOne(sql.type(z.object({ verdict: z.string(), problems: z.array(z.string()) }))`
          SELECT verdict, audit -> 'problems' AS problems FROM canaries WHERE task_id = ${waiting.task_id} AND verdict IS NOT NULL`),
      );
      expect(verdict).toEqual({ verdict: 'passed', problems: [] });
      expect(await handedEarly()).toBe(before + 2);
      const stored = await stack.db.oneFirst(sql.type(z.object({ result: z.record(z.any()) }))`SELECT result FROM tasks WHERE task_id = ${waiting.task_id}`);
      expect(stored.message).toMatchObject({ role: 'assistant' });
      expect((await a).status).toBe(200);
      expect((await b).status).toBe(200);
      await auditsSettled(solver.solverId);
      expect((await trustOf(solver.solverId)).quarantined).toBe(false);
    } finally {
      // A failed step must not leave the solver holding chats, nor their requests open past the stack.
      held.forEach((release) => release());
    }
  });
});

describe('on the wire', () => {
  const startSolver = stackWith({ TRUST_PROBATION_CANARIES: '0', CANARY_EVERY_TASKS: '2' });

  test('audits and client chats of many shapes reach a solver alike: frame fields, id form, attempt, deadline and payload fields tell them apart no better than chance', async () => {
    const solver = await startSolver({ behaviour: honest, capabilities: strongChat() });
    const client = await registerAccount(stack.url, '5000');
    const CHATS = 80;
    for (let i = 0; i < CHATS; i++) {
      // As the OpenAI SDKs' callers send them: streamed or not, with tools, a response format, sampling fields at times.
      const answered = await api(stack.url, 'POST', '/v1/chat/completions', { body: clientChatBody(), headers: client.auth });
      expect(answered.status).toBe(200);
      await auditsSettled(solver.solverId);
    }
    const audits = await auditTaskIds(solver.solverId);
    expect(audits.size).toBeGreaterThan(CHATS / 4);
    const frameFeatures = (frame: TaskFrame) => ({
      ...features(frame.payload),
      fields: Object.keys(frame).sort().join(','),
      id: frame.task_id.replace(/_[0-9a-f]+$/, (hex) => `_${'x'.repeat(hex.length - 1)}`),
      attempt: frame.attempt_id.slice(frame.task_id.length),
      // Seconds left to the deadline as the frame arrived, to the second.
      deadline: String(Math.round((Date.parse(frame.deadline) - receivedAt.get(frame.task_id)!) / 1000)),
    });
    const auditFrames = solver.received.filter((frame) => audits.has(frame.task_id)).map(frameFeatures);
    const clientFrames = solver.received.filter((frame) => !audits.has(frame.task_id)).map(frameFeatures);
    for (const key of ['fields', 'id', 'attempt'] as const) expect(new Set(auditFrames.map((x) => x[key]))).toEqual(new Set(clientFrames.map((x) => x[key])));
    for (const x of [...auditFrames, ...clientFrames]) expect(Math.abs(Number(x.deadline) - stack.config.chatTimeoutSeconds)).toBeLessThanOrEqual(2);
    // Chance is 0.5; with some thirty audits scored on half of them, three standard deviations are about 0.25.
    expect(classifierAccuracy(auditFrames, clientFrames)).toBeLessThan(0.75);
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
    expect((await trustOf(solver.solverId)).quarantined).toBe(false);
  });
});
