import { PUBLIC_MODEL_ID } from '../schemas/domain';
import type { ChatCompletionRequest } from '../schemas/requests';

/**
 * The payload a chat request becomes, as its solver receives it: the request's own fields with the
 * public model name, less what only the client's connection uses (`stream`, `stream_options`: the
 * service streams to its client whatever the solver does). Chat audits go through it too, so that an
 * audit's payload is built as a client's is.
 */
export function chatTaskPayload(body: ChatCompletionRequest & Record<string, unknown>): Record<string, unknown> {
  const {
    stream: _stream,
    stream_options: _streamOptions,
    ...rest
  } = body as ChatCompletionRequest & { stream_options?: unknown };
  return { ...rest, model: PUBLIC_MODEL_ID };
}
