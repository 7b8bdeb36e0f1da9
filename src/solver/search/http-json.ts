import { SolverError, firstLine } from '../errors';

/** GET a JSON document from a search API the operator configured (not a client-supplied URL). */
export async function getJson(
  url: string,
  headers: Record<string, string>,
  signal: AbortSignal,
  provider: string,
): Promise<unknown> {
  let response: Response;
  try {
    response = await fetch(url, { headers: { accept: 'application/json', ...headers }, signal });
  } catch (error) {
    if (signal.aborted) throw signal.reason;
    throw new SolverError('upstream_error', `${provider} is unreachable: ${firstLine((error as Error).message)}`);
  }
  if (!response.ok) {
    const detail = firstLine(await response.text().catch(() => ''));
    throw new SolverError(
      'upstream_error',
      `${provider} answered HTTP ${response.status}${detail ? `: ${detail.slice(0, 200)}` : ''}`,
    );
  }
  try {
    return await response.json();
  } catch {
    throw new SolverError('upstream_error', `${provider} answered with something that is not JSON`);
  }
}
