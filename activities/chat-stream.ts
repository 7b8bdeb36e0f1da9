import type { NodeActivityDeps } from './deps';

export interface FenceInput {
  completionId: string;
  attemptId: string;
}

/** Runs on the API node serving a chat client's HTTP request (its own task queue). */
export function createChatStreamActivities({
  relay,
  earlyAttempts,
}: Pick<NodeActivityDeps, 'relay' | 'earlyAttempts'>) {
  return {
    /**
     * Shuts out an attempt whose node stopped answering and reports how many deltas the client has
     * been given (null: this node no longer serves the completion). None given means another solver
     * may answer from the start. An attempt sent from here as the completion was created, and never taken
     * over, is cancelled.
     */
    async fenceChatAttempt(input: FenceInput): Promise<number | null> {
      earlyAttempts?.abandon(input.attemptId);
      return relay.fence(input.completionId, input.attemptId);
    },
  };
}
