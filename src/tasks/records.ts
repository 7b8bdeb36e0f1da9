import type { CommonQueryMethods } from 'slonik';
import { resolveArtifacts } from '../artifacts/results';
import type { ArtifactStore } from '../artifacts/store';
import { getTaskRecord, type TaskRecord } from '../db/tasks';

/** The task record as clients see it: its result's screenshots and large page bodies read back from the artifact store. */
export async function readTaskRecord(deps: { db: CommonQueryMethods; artifacts: ArtifactStore }, taskId: string, accountId?: string): Promise<TaskRecord | null> {
  const record = await getTaskRecord(deps.db, taskId, accountId);
  return withArtifacts(deps.artifacts, record);
}

/** A record read elsewhere, its result's references expanded. */
export async function withArtifacts<T extends { result: Record<string, unknown> | null } | null>(artifacts: ArtifactStore, record: T): Promise<T> {
  if (!record?.result) return record;
  return { ...record, result: await resolveArtifacts(artifacts, record.result) };
}
