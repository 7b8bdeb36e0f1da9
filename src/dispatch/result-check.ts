import type { CapabilityTaskType } from '../schemas/domain';
import { RESULT_SCHEMAS, type ResultIssueData } from '../schemas/frames';
import { zodErrorToDetail } from '../schemas/issues';

/**
 * What is wrong with a solver's result for its task type, as 422-style items under `result`; null when
 * it passes. Items leave out `input`: the solver has it, and it may be a whole page or image.
 */
export function resultIssues(taskType: CapabilityTaskType, result: unknown): ResultIssueData[] | null {
  const checked = RESULT_SCHEMAS[taskType].safeParse(result);
  if (checked.success) return null;
  return zodErrorToDetail(checked.error, result, ['result']).map(({ type, loc, msg, ctx }) => ({
    type,
    loc,
    msg,
    ...(ctx ? { ctx } : {}),
  }));
}

export const describeIssues = (issues: ResultIssueData[]) =>
  issues.map((issue) => `${issue.loc.slice(1).join('.') || 'result'}: ${issue.msg}`).join('; ');
