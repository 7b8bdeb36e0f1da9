import { ApiError } from '../errors';
import type { DomainGuard } from '../guard/domain-guard';
import { RequestValidationError } from './validation';

/**
 * Refuses a target URL the domain policy does not allow: 403 domain_blocked, or the 422 of pydantic's
 * `url_parsing` at `loc` when it is not an absolute URL at all (no host to judge).
 */
export async function assertAllowedTarget(
  guard: Pick<DomainGuard, 'check'>,
  url: string,
  loc: (string | number)[],
): Promise<void> {
  const verdict = await guard.check(url);
  if (verdict.allowed) return;
  if (verdict.reason === 'invalid_url') {
    throw new RequestValidationError([
      { type: 'url_parsing', loc, msg: 'Input should be a valid URL, relative URL without a base', input: url },
    ]);
  }
  throw new ApiError('domain_blocked', verdict.message, { url });
}
