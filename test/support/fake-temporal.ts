import type { Client } from '@temporalio/client';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError } from '@temporalio/common';

/** A workflow start as the client was asked for it. */
export interface RecordedStart {
  workflowType: string;
  workflowId: string;
  args: unknown[];
  taskQueue: string;
  requestEagerStart?: boolean;
}

/** A signal as a workflow received it. */
export interface RecordedSignal {
  workflowId: string;
  signal: string;
  args: unknown[];
}

/**
 * The part of the Temporal client the task engine uses (`workflow.start`, and a handle's `signal`,
 * `cancel` and `result`), kept in memory: it records what it is asked, runs the test's stand-in for a
 * workflow's reaction to a signal, and can be told to fail a start. A workflow it never started (or
 * one the test ends with `forget`) is not found, as a real client reports it.
 */
export class FakeTemporal {
  readonly starts: RecordedStart[] = [];
  readonly signals: RecordedSignal[] = [];
  readonly cancels: string[] = [];
  /** The workflows it knows: started here, or named by `running`. */
  private readonly known = new Set<string>();
  private readonly results = new Map<string, { promise: Promise<unknown>; resolve: (value: unknown) => void }>();
  private readonly failing: Error[] = [];
  /** What a signalled workflow does (e.g. end its task through the engine), awaited before `signal` returns. */
  onSignal: (signal: RecordedSignal) => Promise<void> | void = () => undefined;

  /** The engine's view: only the members above exist. */
  get client(): Client {
    return { workflow: { start: this.start, getHandle: this.getHandle } } as unknown as Client;
  }

  /** The next start throws `error` (by default, as if the server were unreachable). */
  failNextStart(error: Error = new Error('14 UNAVAILABLE: No connection established')): void {
    this.failing.push(error);
  }

  /** A workflow started elsewhere (by another node, or before this test's client existed). */
  running(workflowId: string): void {
    this.known.add(workflowId);
  }

  /** The workflow has ended and its history is gone: signals and cancels find no workflow. */
  forget(workflowId: string): void {
    this.known.delete(workflowId);
  }

  /** The workflow's result, which `result()` on its handle answers. */
  finish(workflowId: string, result: unknown): void {
    this.resultOf(workflowId).resolve(result);
  }

  private readonly start = async (workflowType: string, options: { workflowId: string; args?: unknown[]; taskQueue: string; requestEagerStart?: boolean }) => {
    const failure = this.failing.shift();
    if (failure) throw failure;
    if (this.known.has(options.workflowId)) throw new WorkflowExecutionAlreadyStartedError('Workflow execution already started', options.workflowId, workflowType);
    this.known.add(options.workflowId);
    this.starts.push({ workflowType, workflowId: options.workflowId, args: options.args ?? [], taskQueue: options.taskQueue, requestEagerStart: options.requestEagerStart });
  };

  private readonly getHandle = (workflowId: string) => ({
    workflowId,
    signal: async (definition: string | { name: string }, ...args: unknown[]) => {
      this.mustExist(workflowId);
      const signal = { workflowId, signal: typeof definition === 'string' ? definition : definition.name, args };
      this.signals.push(signal);
      await this.onSignal(signal);
    },
    cancel: async () => {
      this.mustExist(workflowId);
      this.cancels.push(workflowId);
    },
    result: () => this.resultOf(workflowId).promise,
  });

  private mustExist(workflowId: string): void {
    if (!this.known.has(workflowId)) throw new WorkflowNotFoundError(`workflow not found for ID: ${workflowId}`, workflowId, undefined);
  }

  private resultOf(workflowId: string) {
    let entry = this.results.get(workflowId);
    if (!entry) {
      let resolve!: (value: unknown) => void;
      const promise = new Promise<unknown>((done) => {
        resolve = done;
      });
      this.results.set(workflowId, (entry = { promise, resolve }));
    }
    return entry;
  }
}
