import type { CommonQueryMethods } from 'slonik';
import { artifactKeysOf, resolveArtifacts } from '../artifacts/results';
import { ArtifactMissingError, type ArtifactStore } from '../artifacts/store';
import { getTaskRecord, getTaskRow, type TaskRecord } from '../db/tasks/records';

/**
 * The task record as clients see it: its result's screenshots and large page bodies read back from the
 * artifact store. A result the retention purge removed between the two reads is answered as removed.
 */
export async function readTaskRecord(
  deps: { db: CommonQueryMethods; artifacts: ArtifactStore },
  taskId: string,
  accountId?: string,
): Promise<TaskRecord | null> {
  const record = await getTaskRecord(deps.db, taskId, accountId);
  try {
    return await withArtifacts(deps.artifacts, record);
  } catch (error) {
    if (!(error instanceof ArtifactMissingError)) throw error;
    const again = await getTaskRecord(deps.db, taskId, accountId);
    if (again?.result_expired_at) return again;
    throw error;
  }
}

/** A record read elsewhere, its result's references expanded. */
export async function withArtifacts<T extends { result: Record<string, unknown> | null } | null>(
  artifacts: ArtifactStore,
  record: T,
): Promise<T> {
  if (!record?.result) return record;
  return { ...record, result: await resolveArtifacts(artifacts, record.result) };
}

/**
 * Deletes the artifacts written for a result that its task did not take (reassigned, or finished by
 * something else meanwhile). Keys the stored result refers to stay: a retried activity writes the same
 * keys as the run whose result was stored.
 */
export async function deleteUntakenArtifacts(
  deps: { db: CommonQueryMethods; artifacts: ArtifactStore },
  taskId: string,
  keys: readonly string[],
): Promise<void> {
  if (keys.length === 0) return;
  const kept = new Set(artifactKeysOf((await getTaskRow(deps.db, taskId))?.result ?? null));
  await deps.artifacts.delete(keys.filter((key) => !kept.has(key)));
}
