import { z } from './zod';
import { CAPABILITY_TASK_TYPES, SNAPSHOT_FORMATS } from './domain';

/**
 * Solver WebSocket protocol, version 1 (docs/solver-protocol.md). One schema per frame.
 * Third-party solvers implement this: change it only by adding optional fields.
 */

// Server → solver
export const WelcomeFrame = z.object({
  type: z.literal('welcome'),
  protocol: z.literal(1),
  solver_id: z.string(),
  heartbeat_interval_ms: z.number().int(),
});

export const TaskFrame = z.object({
  type: z.literal('task'),
  attempt_id: z.string(),
  task_id: z.string(),
  task_type: z.enum(CAPABILITY_TASK_TYPES),
  payload: z.record(z.any()),
  deadline: z.string(),
});

export const CancelFrame = z.object({
  type: z.literal('cancel'),
  attempt_id: z.string(),
  reason: z.string(),
});

export const ProtocolErrorFrame = z.object({ type: z.literal('protocol_error'), message: z.string() });

// Solver → server
export const AcceptFrame = z.object({ type: z.literal('accept'), attempt_id: z.string().min(1) });

export const ResultFrame = z.object({
  type: z.literal('result'),
  attempt_id: z.string().min(1),
  result: z.record(z.any()),
});

export const SolverErrorFrame = z.object({
  type: z.literal('error'),
  attempt_id: z.string().min(1),
  error: z.object({ type: z.string(), message: z.string() }),
  retryable: z.boolean().default(true),
});

export const ChunkFrame = z.object({
  type: z.literal('chunk'),
  attempt_id: z.string().min(1),
  delta: z.record(z.any()),
});

export const SolverFrame = z.discriminatedUnion('type', [AcceptFrame, ResultFrame, SolverErrorFrame, ChunkFrame]);

export type WelcomeMessage = z.infer<typeof WelcomeFrame>;
export type TaskMessage = z.infer<typeof TaskFrame>;
export type CancelMessage = z.infer<typeof CancelFrame>;
export type SolverMessage = z.infer<typeof SolverFrame>;
export type ServerMessage = WelcomeMessage | TaskMessage | CancelMessage | z.infer<typeof ProtocolErrorFrame>;

/** Results a solver returns per task type; a result that fails its schema is a failed attempt. */
export const FetchResult = z.object({
  url: z.string(),
  final_url: z.string(),
  status_code: z.number().int(),
  content_type: z.enum(['markdown', 'html']),
  content: z.string(),
  title: z.string().nullable().optional(),
});

export const SearchResult = z.object({
  results: z.array(z.object({ title: z.string(), url: z.string(), snippet: z.string() })),
});

export const ScreenshotResult = z.object({
  mime_type: z.literal('image/png'),
  image_base64: z.string().min(1),
  width: z.number().int().positive(),
  height: z.number().int().positive(),
});

export const SnapshotResult = z.object({
  url: z.string(),
  snapshot: z.union([z.string(), z.record(z.any())]),
  snapshot_format: z.enum(SNAPSHOT_FORMATS),
  title: z.string().nullable().optional(),
});

export const ChatResult = z.object({
  finish_reason: z.string().nullable().optional(),
  usage: z
    .object({
      prompt_tokens: z.number().int().min(0),
      completion_tokens: z.number().int().min(0),
      total_tokens: z.number().int().min(0).optional(),
    })
    .passthrough(),
  model: z.string().optional(),
});

export const RESULT_SCHEMAS = {
  proxy_fetch: FetchResult,
  web_search: SearchResult,
  screenshot: ScreenshotResult,
  page_snapshot: SnapshotResult,
  chat_completion: ChatResult,
} as const;

export type FetchResultData = z.infer<typeof FetchResult>;
export type SearchResultData = z.infer<typeof SearchResult>;
export type ScreenshotResultData = z.infer<typeof ScreenshotResult>;
export type SnapshotResultData = z.infer<typeof SnapshotResult>;
export type ChatResultData = z.infer<typeof ChatResult>;
