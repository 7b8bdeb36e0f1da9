/**
 * Names shared by the workflows and the code that starts or signals them: task queues, signals,
 * queries and workflow ids. Importable from workflow code (no I/O here).
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { Assignment } from '../src/db/tasks';

export const DEFAULT_TASK_QUEUE = 'marketplace';

/** Each API node runs a worker on its own queue: activities that must reach a solver's socket go there. */
export const nodeTaskQueue = (nodeId: string) => `node-${nodeId}`;

export const taskWorkflowId = (taskId: string) => `task-${taskId}`;
/** A chat completion's workflow id is its OpenAI-style completion id, so ops find what clients quote. */
export const chatWorkflowId = (taskId: string) => `chatcmpl-${taskId.replace(/^chat_/, '')}`;

export interface AdminCompletion {
  solverId: string;
  result: Record<string, unknown>;
}
export const adminCompleteSignal = defineSignal<[AdminCompletion]>('adminComplete');
export const taskStatusQuery = defineQuery<string>('status');

export const TaskTypeAttribute = defineSearchAttributeKey('TaskType', SearchAttributeType.KEYWORD);
export const AccountIdAttribute = defineSearchAttributeKey('AccountId', SearchAttributeType.KEYWORD);
export const TaskStatusAttribute = defineSearchAttributeKey('TaskStatus', SearchAttributeType.KEYWORD);

export interface TaskWorkflowInput {
  taskId: string;
  taskType: string;
  maxPricePoints: string;
  timeoutSeconds: number;
  maxAttempts: number;
  attemptTimeoutSeconds: number;
  acceptTimeoutMs: number;
  /** Set for chat: only strong-tier capabilities for these models are eligible. */
  strongModels?: string[];
  /** Set for chat: deltas go to this node, which serves the client's stream. */
  stream?: { clientNodeId: string; completionId: string };
  /** Attempt 1, when it was matched as the task was created. */
  firstAssignment?: Assignment;
  /** Attempt 1 went to its solver as the task was created; its dispatch activity takes it over. */
  firstAttemptStartedEarly?: boolean;
}

export interface TaskWorkflowResult {
  taskId: string;
  status: 'completed' | 'failed' | 'timed_out';
  error?: { type: string; message: string };
}
