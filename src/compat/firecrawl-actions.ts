import { ApiError } from '../errors';
import {
  MAX_PAGE_ACTIONS,
  PAGE_ACTION_TYPES,
  PageAction,
  pageActionProblems,
  type PageActionStep,
} from '../schemas/requests';
import type { SnapshotResultData } from '../schemas/frames';

type ActionsResult = NonNullable<SnapshotResultData['actions']>;

/**
 * Firecrawl's `actions`: checked here so that a refused one is a 400 naming it (its index and type), as
 * Firecrawl names it, before anything is held; they travel to the solver as they are, in a page_snapshot
 * task's payload.
 */

function refused(index: number, type: unknown, message: string): ApiError {
  const name = typeof type === 'string' ? type : String(type);
  return new ApiError('invalid_action', `Action ${index} ("${name}"): ${message}`, { action: name, index });
}

export function parseActions(raw: unknown, waitForMs: number): PageActionStep[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw))
    throw new ApiError('invalid_action', 'actions must be a list of actions', { action: null, index: null });
  if (raw.length > MAX_PAGE_ACTIONS)
    throw refused(
      MAX_PAGE_ACTIONS,
      (raw[MAX_PAGE_ACTIONS] as { type?: unknown })?.type,
      `at most ${MAX_PAGE_ACTIONS} actions are allowed`,
    );
  const actions = raw.map((entry, index) => {
    const type = (entry as { type?: unknown } | null)?.type;
    if (!(PAGE_ACTION_TYPES as readonly unknown[]).includes(type)) {
      throw refused(
        index,
        type,
        `this action type is not supported by this service; it serves ${PAGE_ACTION_TYPES.join(', ')}`,
      );
    }
    const parsed = PageAction.safeParse(entry);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const field = issue.path.join('.');
      throw refused(
        index,
        type,
        issue.code === 'unrecognized_keys'
          ? `unknown field ${issue.keys.map((key) => `"${key}"`).join(', ')}`
          : `${field ? `${field}: ` : ''}${issue.message}`,
      );
    }
    return parsed.data;
  });
  const problem = pageActionProblems(actions, waitForMs)[0];
  if (problem) throw refused(problem.index, actions[problem.index]?.type, problem.message);
  return actions;
}

/**
 * The solver's action results in Firecrawl's `data.actions` (v2 adds `pdfs`, always empty here); each
 * screenshot is the URL `screenshotUrl` gives for its index, as Firecrawl answers them.
 */
export function firecrawlActions(
  result: ActionsResult,
  version: 'v1' | 'v2',
  screenshotUrl: (index: number) => string,
) {
  return {
    screenshots: result.screenshots.map((_, index) => screenshotUrl(index)),
    scrapes: result.scrapes,
    javascriptReturns: result.javascript_returns,
    ...(version === 'v2' ? { pdfs: [] as string[] } : {}),
  };
}
