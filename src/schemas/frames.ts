import { z } from './zod';
import { CAPABILITY_TASK_TYPES, SNAPSHOT_FORMATS, SOLVER_PROTOCOL_VERSION } from './domain';

/**
 * Solver WebSocket protocol, version 1 (docs/solver-protocol.md). One schema per frame.
 * Third-party solvers implement this: change it only by adding optional fields.
 */

// Server → solver
export const WelcomeFrame = z
  .object({
    type: z.literal('welcome'),
    protocol: z.literal(SOLVER_PROTOCOL_VERSION),
    solver_id: z.string().describe("The solver's account_id"),
    heartbeat_interval_ms: z
      .number()
      .int()
      .describe('The server pings this often; answer each ping with a pong before the next one'),
    server_time: z
      .string()
      .optional()
      .describe(
        'The server clock as the frame was sent (ISO 8601, UTC): correct deadlines by its ' + 'difference from yours',
      ),
  })
  .describe('First frame of every connection; wait for it before sending anything');

export const TaskFrame = z
  .object({
    type: z.literal('task'),
    attempt_id: z.string().describe('Names this attempt (<task_id>.a<n>); every answer refers to it'),
    task_id: z.string(),
    task_type: z.enum(CAPABILITY_TASK_TYPES),
    payload: z.record(z.any()).describe("The client's request fields for this task type, defaults applied"),
    deadline: z.string().describe('Attempt deadline (ISO 8601, UTC): answer before it'),
    test: z
      .boolean()
      .optional()
      .describe('True only on a test task this solver asked for: no client, no points, not in the stats'),
  })
  .describe('An attempt to run: answer with accept, then result or error');

export const CancelFrame = z
  .object({
    type: z.literal('cancel'),
    attempt_id: z.string(),
    reason: z.string().describe('accept_timeout, deadline or cancelled; treat any other value like cancelled'),
  })
  .describe('Stop the attempt: nothing sent about it afterwards counts');

export const ProtocolErrorFrame = z
  .object({ type: z.literal('protocol_error'), message: z.string() })
  .describe('A frame from the solver could not be read; the connection stays open');

/** What is wrong with a result, in the shape of a 422's `detail` items (`loc` starts at `result`). */
export const ResultIssue = z
  .object({
    type: z.string(),
    loc: z.array(z.union([z.string(), z.number().int()])),
    msg: z.string(),
    ctx: z.record(z.any()).optional(),
  })
  .describe('One problem of a result, as a 422 detail item without input; loc starts at "result"');

export const ResultRejectedFrame = z
  .object({
    type: z.literal('result_rejected'),
    attempt_id: z.string(),
    issues: z.array(ResultIssue),
  })
  .describe("The result failed its task type's schema: the attempt failed and is not paid");

export const DrainingFrame = z
  .object({
    type: z.literal('draining'),
    running_attempts: z
      .number()
      .int()
      .describe('Attempts still open on this connection; close it once they are answered'),
  })
  .describe('The answer to drain: no new attempt is matched to this connection from now on');

export const TEST_OUTCOMES = ['passed', 'invalid_result', 'error', 'accept_timeout', 'deadline', 'refused'] as const;

export const TestResultFrame = z
  .object({
    type: z.literal('test_result'),
    attempt_id: z.string().nullable().describe("The test task's attempt; null when none was sent (outcome refused)"),
    task_type: z.enum(CAPABILITY_TASK_TYPES),
    passed: z.boolean().describe("True when the solver answered with a result that passed its task type's schema"),
    outcome: z.enum(TEST_OUTCOMES),
    issues: z.array(ResultIssue).optional().describe('invalid_result: what the schema refused'),
    error: z
      .object({ type: z.string(), message: z.string() })
      .optional()
      .describe("error: the solver's own error; otherwise why the test did not end with a valid result"),
    retryable: z.boolean().optional().describe('error: the retryable the solver sent'),
    chunks: z.number().int().optional().describe('chat_completion: chunk frames received before the result'),
  })
  .describe('The verdict on a test task (test mode): nothing was stored, paid or counted');

// Solver → server
export const AcceptFrame = z
  .object({ type: z.literal('accept'), attempt_id: z.string().min(1) })
  .describe('The solver takes the attempt; send it within the acceptance deadline');

export const ResultFrame = z
  .object({
    type: z.literal('result'),
    attempt_id: z.string().min(1),
    result: z.record(z.any()).describe('Must match results[task_type] of this document'),
  })
  .describe("The attempt's result: a valid one completes the task and is paid");

export const SolverErrorFrame = z
  .object({
    type: z.literal('error'),
    attempt_id: z.string().min(1),
    error: z.object({
      type: z.string().describe('A short snake_case word of your choice; clients see it as error.solver_error_type'),
      message: z.string().describe("A sentence; quoted in the client's error message"),
    }),
    retryable: z.boolean().default(true).describe('false: no other solver could succeed, the task fails at once'),
  })
  .describe('The attempt failed, or (without accept) is declined');

export const ChunkFrame = z
  .object({
    type: z.literal('chunk'),
    attempt_id: z.string().min(1),
    delta: z.record(z.any()).describe('An OpenAI chat completion delta object'),
  })
  .describe('Chat only: a piece of the answer, relayed to the client in order, before the result');

export const DrainFrame = z
  .object({ type: z.literal('drain') })
  .describe('Take no new task on this connection; the running ones go on. Answered with draining');

export const TestTaskFrame = z
  .object({
    type: z.literal('test_task'),
    task_type: z.enum(CAPABILITY_TASK_TYPES),
    payload: z.record(z.any()).optional().describe('A payload a client could send; without it the server picks one'),
  })
  .describe(
    'Test mode: asks for a synthetic task of task_type, answered by a task frame with test ' + 'true, then test_result',
  );

export const SolverFrame = z.discriminatedUnion('type', [
  AcceptFrame,
  ResultFrame,
  SolverErrorFrame,
  ChunkFrame,
  DrainFrame,
  TestTaskFrame,
]);

/** Every frame of the protocol, by direction, for the JSON Schema document (src/schemas/json-schema.ts). */
export const SERVER_FRAMES = {
  welcome: WelcomeFrame,
  task: TaskFrame,
  cancel: CancelFrame,
  protocol_error: ProtocolErrorFrame,
  result_rejected: ResultRejectedFrame,
  draining: DrainingFrame,
  test_result: TestResultFrame,
} as const;

export const SOLVER_FRAMES = {
  accept: AcceptFrame,
  chunk: ChunkFrame,
  result: ResultFrame,
  error: SolverErrorFrame,
  drain: DrainFrame,
  test_task: TestTaskFrame,
} as const;

export type WelcomeMessage = z.infer<typeof WelcomeFrame>;
export type TaskMessage = z.infer<typeof TaskFrame>;
export type CancelMessage = z.infer<typeof CancelFrame>;
export type SolverMessage = z.infer<typeof SolverFrame>;
export type ResultIssueData = z.infer<typeof ResultIssue>;
export type TestResultMessage = z.infer<typeof TestResultFrame>;
export type ServerMessage =
  | WelcomeMessage
  | TaskMessage
  | CancelMessage
  | z.infer<typeof ProtocolErrorFrame>
  | z.infer<typeof ResultRejectedFrame>
  | z.infer<typeof DrainingFrame>
  | TestResultMessage;

/** Results a solver returns per task type; a result that fails its schema is a failed attempt. */
export const FetchResult = z.object({
  url: z.string().describe('The URL asked for'),
  final_url: z.string().describe('The URL after redirects'),
  status_code: z.number().int().describe("The target's HTTP status: a 404 page is a result, not an error"),
  content_type: z.enum(['markdown', 'html']).describe('html when the payload asked for raw_html, else markdown'),
  content: z.string(),
  title: z.string().nullable().optional(),
});

export const SearchResult = z.object({
  results: z
    .array(z.object({ title: z.string(), url: z.string(), snippet: z.string() }))
    .describe("Best first, at most the payload's count"),
});

export const ScreenshotResult = z.object({
  mime_type: z.literal('image/png'),
  image_base64: z.string().min(1).describe('The PNG, base64-encoded'),
  width: z.number().int().positive().describe("The image's width in pixels"),
  height: z.number().int().positive().describe("The image's height in pixels"),
});

export const SnapshotResult = z.object({
  url: z.string(),
  snapshot: z.union([z.string(), z.record(z.any())]),
  snapshot_format: z.enum(SNAPSHOT_FORMATS).describe("The payload's mode, or markdown when it has none"),
  title: z.string().nullable().optional(),
  status_code: z.number().int().nullable().optional().describe("html mode: the HTTP status of the page's document"),
  actions: z
    .object({
      screenshots: z.array(z.string()).describe('PNG images, base64, one per screenshot action in order'),
      scrapes: z
        .array(z.object({ url: z.string(), html: z.string() }))
        .describe("The page's URL and HTML at each scrape action"),
      javascript_returns: z
        .array(z.object({ type: z.string(), value: z.any() }))
        .describe("Each executeJavascript action's value and its JavaScript typeof"),
    })
    .optional()
    .describe('html mode with actions: what the actions returned'),
});

export const ChatResult = z.object({
  finish_reason: z.string().nullable().optional(),
  usage: z
    .object({
      prompt_tokens: z.number().int().min(0),
      completion_tokens: z.number().int().min(0),
      total_tokens: z.number().int().min(0).optional(),
    })
    .passthrough()
    .describe(
      'Priced per_token as min_price_points + (prompt_cost × prompt_tokens + completion_cost × ' +
        'completion_tokens) / 1000 (at most the hold), the tokens billed up to the bound of what ' +
        'the service counted of the prompt and the delivered chunks (docs/solver-protocol.md, ' +
        '"Prices and fees")',
    ),
  model: z.string().optional().describe('The model that answered'),
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
