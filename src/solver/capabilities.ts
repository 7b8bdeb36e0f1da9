import { SolverCapabilitiesBody, type SolverCapabilityInput } from '../schemas/requests';
import type { CapabilityTaskType } from '../schemas/domain';
import type { SolverConfig } from './config';
import { firstLine } from './errors';

const FULFILLMENT: Record<CapabilityTaskType, SolverCapabilityInput['fulfillment_path']> = {
  proxy_fetch: 'http',
  web_search: 'search_api',
  screenshot: 'browser',
  page_snapshot: 'browser',
  chat_completion: 'provider_api',
};

const BROWSER_TASKS: readonly CapabilityTaskType[] = ['screenshot', 'page_snapshot'];

/**
 * Attempts of a task type run at once: chat (I/O-bound forwarding) by SOLVER_CHAT_MAX_CONCURRENT, web
 * tasks by SOLVER_MAX_CONCURRENT, browser tasks at most BROWSER_PAGES (beyond the page pool they would
 * only queue here; the marketplace routes them elsewhere).
 */
export function concurrencyOf(config: SolverConfig, taskType: CapabilityTaskType): number {
  if (taskType === 'chat_completion') return config.chatMaxConcurrent;
  return BROWSER_TASKS.includes(taskType) ? Math.min(config.maxConcurrent, config.browserPages) : config.maxConcurrent;
}

/** One record per offered task type; chat gets one per advertised model. */
export function buildCapabilities(
  config: SolverConfig,
  taskTypes: readonly CapabilityTaskType[],
): SolverCapabilityInput[] {
  const records = taskTypes.flatMap((taskType): SolverCapabilityInput[] => {
    const common = {
      task_type: taskType,
      fulfillment_path: FULFILLMENT[taskType],
      provider_name: config.providerName,
      min_price_points: config.pricePoints[taskType] ?? '0',
      max_concurrent: concurrencyOf(config, taskType),
    };
    if (taskType === 'chat_completion') {
      const models = config.chat?.models ?? ['unspecified'];
      return models.map((model) => ({
        ...common,
        tier: config.chat?.tier ?? 'standard',
        billing_type: 'per_token',
        model_name: model,
        marginal_cost: config.chat?.pointsPer1kTokens ?? '0',
        ...(config.chat?.promptPointsPer1kTokens ? { prompt_cost: config.chat.promptPointsPer1kTokens } : {}),
        ...(config.chat?.completionPointsPer1kTokens
          ? { completion_cost: config.chat.completionPointsPer1kTokens }
          : {}),
      }));
    }
    // Only web tasks fetch pages: a chat answer does not depend on where it is asked from.
    const country = config.country ? { country: config.country } : {};
    return [
      {
        ...common,
        tier: 'standard',
        billing_type: 'per_request',
        model_name: webModelName(config, taskType),
        marginal_cost: '0',
        ...country,
      },
    ];
  });
  return SolverCapabilitiesBody.parse(records);
}

function webModelName(config: SolverConfig, taskType: CapabilityTaskType): string {
  if (taskType === 'proxy_fetch') return 'http-fetch';
  if (taskType === 'web_search') return config.search.backend === 'local' ? 'local-index' : config.search.backend;
  return 'chromium';
}

export class RegistrationError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
  ) {
    super(message);
    this.name = 'RegistrationError';
  }

  /** The marketplace refused the key or the records: retrying the same request cannot help. */
  get refused(): boolean {
    return this.status === 401 || this.status === 403 || this.status === 422;
  }
}

export type Registration = {
  /** Server clock minus local clock (ms), from the response's Date header; 0 when unknown. */
  clockSkewMs: number;
};

export async function registerCapabilities(
  baseUrl: string,
  apiKey: string,
  capabilities: SolverCapabilityInput[],
  signal: AbortSignal,
): Promise<Registration> {
  let response: Response;
  const sentAt = Date.now();
  try {
    response = await fetch(`${baseUrl}/v1/solver/capabilities`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: JSON.stringify(capabilities),
      signal,
    });
  } catch (error) {
    throw new RegistrationError(
      `the marketplace at ${baseUrl} is unreachable: ${firstLine(String((error as Error).cause ?? error))}`,
      null,
    );
  }
  const text = await response.text().catch(() => '');
  if (!response.ok) {
    throw new RegistrationError(
      `capability registration answered HTTP ${response.status}: ${text.slice(0, 500)}`,
      response.status,
    );
  }
  const serverDate = Date.parse(response.headers.get('date') ?? '');
  const localMidpoint = (sentAt + Date.now()) / 2;
  return { clockSkewMs: Number.isFinite(serverDate) ? serverDate - localMidpoint : 0 };
}
