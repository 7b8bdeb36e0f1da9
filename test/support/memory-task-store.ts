import { artifactKeysOf } from '../../src/artifacts/results';
import { isTerminalState, type Assignment, type TargetFailureType, type TargetFailureVerdict, type TaskFailure, type TaskState, type TerminalState, type WebhookEvent } from '../../src/contract/lifecycle';
import type { Handoff, ReserveAttemptInput } from '../../src/db/matching';
import type { TargetClaim } from '../../src/db/target-claims';
import type { AttemptEnd, Reservation } from '../../src/db/tasks/attempts';
import type { CreateTaskOutcome, NewTask } from '../../src/db/tasks/create';
import type { Finished, FinishOutcome } from '../../src/db/tasks/finish';
import type { TaskRecord, TaskRow } from '../../src/db/tasks/records';
import type { DueDelivery } from '../../src/db/webhooks';
import type { Completion } from '../../src/tasks/finish';
import type { TaskStore } from '../../src/tasks/store';

/** A solver as matching sees it: the types it offers at a price, and its concurrency slots. */
export interface MemorySolver {
  solverId: string;
  taskTypes: string[];
  pricePoints: string;
  slots: number;
  country?: string;
}

interface StoredTask {
  row: TaskRow;
  hold: { points: string; status: 'open' | 'settled' | 'released'; charged: string };
  estimate: string | null;
  workflowStarted: boolean;
  /** When it joined its type's line, while it waits for a slot. */
  queuedAt: number | null;
}

interface StoredAttempt {
  attemptId: string;
  taskId: string;
  attemptNumber: number;
  assignment: Assignment;
  startedAt: string;
  acceptedAt: string | null;
  endedAt: string | null;
  outcome: string;
}

/**
 * A task store in memory (src/tasks/store.ts), for the engine's unit tests: tasks with their holds on
 * the account's balance, attempts on solvers' slots (a freed slot handed to the oldest waiting task of
 * its type, as a handoff), idempotency keys, webhook subscriptions (a finish writes the deliveries their
 * events ask for) and the announcement of each finish. It keeps what the engine's branches depend on,
 * not the statements' every rule: no prices per token, no trust, no reputation.
 */
export class MemoryTaskStore implements TaskStore {
  readonly tasks = new Map<string, StoredTask>();
  readonly attempts = new Map<string, StoredAttempt>();
  readonly balances = new Map<string, number>();
  readonly solvers: MemorySolver[] = [];
  readonly subscriptions = new Map<string, { accountId: string; url: string; events: readonly WebhookEvent[] }>();
  /** Idempotency keys by account and key: the task they created and the request's fingerprint. */
  readonly idempotencyKeys = new Map<string, { taskId: string; fingerprint: string }>();
  readonly deletedArtifacts: string[] = [];
  /** Every call, by operation name, in order (to prove what the engine did not do). */
  readonly calls: string[] = [];
  private readonly finishedListeners = new Set<(payload: { task_id: string; status: TerminalState }) => void>();
  private sequence = 0;

  addAccount(accountId: string, points: number): void {
    this.balances.set(accountId, points);
  }

  addSolver(solver: MemorySolver): void {
    this.solvers.push(solver);
  }

  /** Hears each finish as it commits, as the notification bus does (`task_finished`). */
  onFinished(listener: (payload: { task_id: string; status: TerminalState }) => void): void {
    this.finishedListeners.add(listener);
  }

  row(taskId: string): TaskRow {
    const task = this.tasks.get(taskId);
    if (!task) throw new Error(`no task ${taskId}`);
    return task.row;
  }

  hold(taskId: string): StoredTask['hold'] {
    return this.tasks.get(taskId)!.hold;
  }

  workflowStarted(taskId: string): boolean {
    return this.tasks.get(taskId)!.workflowStarted;
  }

  /** The task was created `seconds` ago (as the sweep of stranded tasks sees its age). */
  age(taskId: string, seconds: number): void {
    this.row(taskId).created_at = new Date(Date.now() - seconds * 1000).toISOString();
  }

  async createTask(task: NewTask & { claim?: undefined }): Promise<CreateTaskOutcome> {
    this.calls.push('createTask');
    const idempotencyKey = task.idempotency && `${task.accountId}/${task.idempotency.key}`;
    const used = idempotencyKey ? this.idempotencyKeys.get(idempotencyKey) : undefined;
    if (used) return used.fingerprint === task.idempotency!.fingerprint ? { kind: 'existing', task: this.row(used.taskId) } : { kind: 'idempotency_key_reused' };
    const balance = this.balances.get(task.accountId);
    if (balance === undefined || balance < Number(task.maxPricePoints)) return { kind: 'insufficient_balance', requiredPoints: task.maxPricePoints };
    const eligible = this.eligible(task.taskType, task.country);
    if (task.match?.requireOnline && eligible.length === 0) return { kind: 'no_solver_online' };
    const free = eligible.find((solver) => this.freeSlot(solver));
    const waiting = this.waiting(task.taskType).length;
    if (!free && task.admission && waiting >= task.admission.maxQueued) return { kind: 'solvers_busy', retryAfterSeconds: 1, waiting };
    const now = new Date().toISOString();
    const row: TaskRow = {
      task_id: task.taskId,
      account_id: task.accountId,
      task_type: task.taskType,
      status: 'queued',
      payload: task.payload,
      max_price_points: task.maxPricePoints,
      price_points: null,
      timeout_seconds: task.timeoutSeconds,
      solver_id: null,
      result: null,
      result_expired_at: null,
      error: null,
      workflow_id: task.workflowId,
      created_at: now,
      updated_at: now,
      completed_at: null,
    };
    this.balances.set(task.accountId, balance - Number(task.maxPricePoints));
    this.tasks.set(task.taskId, { row, hold: { points: task.maxPricePoints, status: 'open', charged: '0' }, estimate: null, workflowStarted: false, queuedAt: free ? null : this.tick() });
    if (idempotencyKey) this.idempotencyKeys.set(idempotencyKey, { taskId: task.taskId, fingerprint: task.idempotency!.fingerprint });
    const firstAssignment = free ? this.assign(task.taskId, 1, free) : null;
    return { kind: 'created', task: { ...row }, firstAssignment, handoffs: [] };
  }

  async markWorkflowStarted(taskId: string): Promise<void> {
    this.calls.push('markWorkflowStarted');
    this.tasks.get(taskId)!.workflowStarted = true;
  }

  async findUnstartedTasks(olderThanSeconds: number): Promise<readonly TaskRow[]> {
    this.calls.push('findUnstartedTasks');
    const now = Date.now();
    // One whose accepted first attempt may still run waits out that attempt's time too.
    const waitOf = (task: StoredTask) => olderThanSeconds + (this.openAttempts(task.row.task_id).some((attempt) => attempt.acceptedAt) ? task.row.timeout_seconds : 0);
    return [...this.tasks.values()]
      .filter((task) => !task.workflowStarted && !isTerminalState(task.row.status) && Date.parse(task.row.created_at) <= now - waitOf(task) * 1000)
      .map((task) => ({ ...task.row }));
  }

  async taskRecord(taskId: string, accountId?: string): Promise<TaskRecord | null> {
    this.calls.push('taskRecord');
    return this.recordOf(taskId, accountId);
  }

  /** The stored record: results here keep their parts inline, so there is nothing to read back. */
  async readTaskRecord(taskId: string, accountId?: string): Promise<TaskRecord | null> {
    this.calls.push('readTaskRecord');
    return this.recordOf(taskId, accountId);
  }

  async completeTask(taskId: string, { completion, feePercent }: { completion: Completion; feePercent: string }): Promise<FinishOutcome> {
    this.calls.push('completeTask');
    const task = this.tasks.get(taskId)!;
    const { row } = task;
    if (isTerminalState(row.status)) return { applied: false, status: row.status };
    const attempt = completion.kind === 'attempt' ? this.attempts.get(completion.attemptId) : undefined;
    if (completion.kind === 'attempt' && (!attempt || attempt.taskId !== taskId || attempt.endedAt)) return { applied: false, status: row.status, attemptClosed: true };
    const price = attempt ? attempt.assignment.pricePoints : row.max_price_points;
    const freed = this.endAttempts(taskId, attempt ? { attemptId: attempt.attemptId, outcome: 'completed' } : { outcome: 'cancelled' });
    Object.assign(row, {
      status: 'completed',
      result: { ...completion.result, ...(completion.stored ?? {}) },
      solver_id: attempt ? attempt.assignment.solverId : completion.kind === 'admin' ? completion.solverId : null,
      price_points: price,
    });
    this.settle(task, price);
    const solverId = row.solver_id!;
    this.balances.set(solverId, (this.balances.get(solverId) ?? 0) + (Number(price) * (100 - Number(feePercent))) / 100);
    return { applied: true, status: 'completed', ...this.afterFinish(task, freed) };
  }

  async recordDeliveredUsage(): Promise<void> {
    this.calls.push('recordDeliveredUsage');
  }

  async failTask(taskId: string, failure: TaskFailure): Promise<Finished> {
    this.calls.push('failTask');
    const task = this.tasks.get(taskId)!;
    const { row } = task;
    if (isTerminalState(row.status)) return { applied: false, status: row.status };
    const freed = this.endAttempts(taskId, { outcome: 'cancelled' });
    Object.assign(row, { status: failure.status, error: failure.error });
    this.settle(task, '0');
    return { applied: true, status: failure.status, ...this.afterFinish(task, freed) };
  }

  async reserveAttempt(input: ReserveAttemptInput): Promise<Reservation> {
    this.calls.push('reserveAttempt');
    const task = this.tasks.get(input.taskId)!;
    if (isTerminalState(task.row.status)) return { assignment: null, untriedOnline: 0, finishedAs: task.row.status };
    const again = [...this.attempts.values()].find((attempt) => attempt.taskId === input.taskId && attempt.attemptNumber === input.attemptNumber);
    if (again) return { assignment: again.assignment };
    const untried = this.eligible(input.taskType).filter((solver) => !input.excludedSolverIds.includes(solver.solverId));
    const free = untried.find((solver) => this.freeSlot(solver));
    if (!free) {
      task.queuedAt ??= this.tick();
      return { assignment: null, untriedOnline: untried.length, finishedAs: null, queued: true };
    }
    return { assignment: this.assign(input.taskId, input.attemptNumber, free) };
  }

  async markAttemptAccepted(attemptId: string): Promise<void> {
    this.calls.push('markAttemptAccepted');
    const attempt = this.attempts.get(attemptId);
    if (attempt && !attempt.endedAt) attempt.acceptedAt ??= new Date().toISOString();
  }

  async closeAttempt(input: AttemptEnd): Promise<{ closed: boolean; handoffs: Handoff[]; targetVerdict: TargetFailureVerdict | null }> {
    this.calls.push('closeAttempt');
    const attempt = this.attempts.get(input.attemptId);
    if (!attempt || attempt.endedAt) return { closed: false, handoffs: [], targetVerdict: null };
    const freed = this.endAttempts(attempt.taskId, { attemptId: attempt.attemptId, outcome: input.outcome });
    const task = this.tasks.get(attempt.taskId)!;
    if (!isTerminalState(task.row.status)) this.update(task.row, { status: 'queued' });
    // A claim the service's own check confirmed is the target's failure; otherwise it is held against the solver.
    const targetVerdict = input.claim ? (input.claim.confirmed ? 'target' : 'solver') : null;
    return { closed: true, handoffs: this.handOn(freed), targetVerdict };
  }

  async examineTargetClaim(attemptId: string, errorType: TargetFailureType): Promise<TargetClaim | null> {
    this.calls.push('examineTargetClaim');
    const attempt = this.attempts.get(attemptId);
    const row = attempt && this.tasks.get(attempt.taskId)!.row;
    const url = typeof row?.payload.url === 'string' && URL.canParse(row.payload.url) ? new URL(row.payload.url) : null;
    if (!row || !url) return null;
    return { errorType, target: url.origin, accountId: row.account_id, platform: false, confirmed: false };
  }

  async saveSubscription(input: { taskId: string; accountId: string; url: string; events: readonly WebhookEvent[] }): Promise<void> {
    this.calls.push('saveSubscription');
    this.subscriptions.set(input.taskId, { accountId: input.accountId, url: input.url, events: input.events });
  }

  async dropSubscription(taskId: string): Promise<void> {
    this.calls.push('dropSubscription');
    this.subscriptions.delete(taskId);
  }

  async accountExists(accountId: string): Promise<boolean> {
    this.calls.push('accountExists');
    return this.balances.has(accountId);
  }

  async countOnlineSolvers(taskType: string, options: { country?: string }): Promise<number> {
    this.calls.push('countOnlineSolvers');
    return this.eligible(taskType, options.country).length;
  }

  /** Probation is not modelled here: no solver waits for a check. */
  async solversAwaitingUnfundedChecks(): Promise<number> {
    this.calls.push('solversAwaitingUnfundedChecks');
    return 0;
  }

  async deleteUntakenArtifacts(taskId: string, keys: readonly string[]): Promise<void> {
    this.calls.push('deleteUntakenArtifacts');
    const kept = new Set(artifactKeysOf(this.tasks.get(taskId)?.row.result ?? null));
    this.deletedArtifacts.push(...keys.filter((key) => !kept.has(key)));
  }

  private recordOf(taskId: string, accountId?: string): TaskRecord | null {
    const task = this.tasks.get(taskId);
    if (!task || (accountId !== undefined && task.row.account_id !== accountId)) return null;
    const { account_id: _account, ...row } = task.row;
    const attempts = [...this.attempts.values()]
      .filter((attempt) => attempt.taskId === taskId)
      .map((attempt) => ({ solver_id: attempt.assignment.solverId, started_at: attempt.startedAt, ended_at: attempt.endedAt, outcome: attempt.outcome }));
    return {
      ...row,
      attempts,
      held_points: task.hold.points,
      estimated_price_points: task.estimate,
      hold_status: task.hold.status,
      charged_points: task.hold.charged,
      verification: 'unchecked',
    };
  }

  private eligible(taskType: string, country?: string): MemorySolver[] {
    return this.solvers.filter((solver) => solver.taskTypes.includes(taskType) && (country === undefined || solver.country === country));
  }

  private openAttempts(taskId?: string): StoredAttempt[] {
    return [...this.attempts.values()].filter((attempt) => !attempt.endedAt && (taskId === undefined || attempt.taskId === taskId));
  }

  private freeSlot(solver: MemorySolver): boolean {
    return this.openAttempts().filter((attempt) => attempt.assignment.solverId === solver.solverId).length < solver.slots;
  }

  /** Active tasks of the type waiting for a slot, oldest first. */
  private waiting(taskType: string): StoredTask[] {
    return [...this.tasks.values()]
      .filter((task) => task.row.task_type === taskType && task.queuedAt !== null && !isTerminalState(task.row.status))
      .sort((a, b) => a.queuedAt! - b.queuedAt!);
  }

  private assign(taskId: string, attemptNumber: number, solver: MemorySolver): Assignment {
    const task = this.tasks.get(taskId)!;
    const assignment: Assignment = {
      attemptId: `attempt_${taskId}_${attemptNumber}`,
      solverId: solver.solverId,
      nodeId: 'node-memory',
      pricePoints: solver.pricePoints,
      billingType: 'per_task',
      marginalCost: '0',
      modelName: '',
    };
    this.attempts.set(assignment.attemptId, { attemptId: assignment.attemptId, taskId, attemptNumber, assignment, startedAt: new Date().toISOString(), acceptedAt: null, endedAt: null, outcome: 'pending' });
    task.queuedAt = null;
    this.update(task.row, { status: 'assigned' });
    return assignment;
  }

  /** Ends the task's open attempts (one, when named); returns the solvers whose slots they freed. */
  private endAttempts(taskId: string, end: { attemptId?: string; outcome: string }): MemorySolver[] {
    const ending = this.openAttempts(taskId).filter((attempt) => end.attemptId === undefined || attempt.attemptId === end.attemptId);
    for (const attempt of ending) Object.assign(attempt, { endedAt: new Date().toISOString(), outcome: end.outcome });
    return ending.map((attempt) => this.solvers.find((solver) => solver.solverId === attempt.assignment.solverId)!).filter(Boolean);
  }

  /** Each freed slot goes to the oldest waiting task its solver fits: a new attempt, told by a handoff. */
  private handOn(freed: MemorySolver[]): Handoff[] {
    const handoffs: Handoff[] = [];
    for (const solver of freed) {
      const next = solver.taskTypes.flatMap((type) => this.waiting(type)).sort((a, b) => a.queuedAt! - b.queuedAt!)[0];
      if (!next) continue;
      const attemptNumber = [...this.attempts.values()].filter((attempt) => attempt.taskId === next.row.task_id).length + 1;
      handoffs.push({ taskId: next.row.task_id, workflowId: next.row.workflow_id, attemptNumber, assignment: this.assign(next.row.task_id, attemptNumber, solver) });
    }
    return handoffs;
  }

  /** The hold settled at `charged` (released when 0), the rest back to the account's balance. */
  private settle(task: StoredTask, charged: string): void {
    const back = Number(task.hold.points) - Number(charged);
    this.balances.set(task.row.account_id, (this.balances.get(task.row.account_id) ?? 0) + back);
    task.hold = { ...task.hold, status: charged === '0' ? 'released' : 'settled', charged };
  }

  /** What a finish leaves for after its commit: the slots handed on, the deliveries due; and its announcement. */
  private afterFinish(task: StoredTask, freed: MemorySolver[]): { handoffs?: Handoff[]; webhooks?: DueDelivery[] } {
    const status = task.row.status as TerminalState;
    this.update(task.row, { completed_at: new Date().toISOString() });
    task.queuedAt = null;
    const subscription = this.subscriptions.get(task.row.task_id);
    const webhooks: DueDelivery[] = subscription?.events.includes(status) ? [{ task_id: task.row.task_id, event: status }] : [];
    const handoffs = this.handOn(freed);
    for (const listener of this.finishedListeners) listener({ task_id: task.row.task_id, status });
    return { ...(handoffs.length ? { handoffs } : {}), ...(webhooks.length ? { webhooks } : {}) };
  }

  private update(row: TaskRow, change: Partial<TaskRow> & { status?: TaskState }): void {
    Object.assign(row, change, { updated_at: new Date().toISOString() });
  }

  private tick(): number {
    return (this.sequence += 1);
  }
}
