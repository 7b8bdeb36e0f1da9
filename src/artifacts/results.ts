import type { ArtifactStore, StoredArtifact } from './store';

/**
 * Large parts of task results in the artifact store. As a result is stored, each part named below is
 * written to the store and replaced in the row by its reference `{"$artifact": {key, size, sha256,
 * content_type, encoding}}`; every reader expands the references back (`resolveArtifacts`), so clients see
 * the result as the solver returned it.
 */

/**
 * Page bodies (a fetch's content, a snapshot's HTML, an action's scraped HTML) of at least this many
 * bytes go to the store; smaller ones stay in the row, where reading them costs no second round trip.
 * Most pages' HTML is below it; screenshots always go, whatever their size.
 */
export const ARTIFACT_MIN_BYTES = 64 * 1024;

type Encoding = 'base64' | 'utf8';

export interface ArtifactReference extends StoredArtifact {
  /** How the field holds the bytes in the result as served: base64 text (images) or the text itself. */
  encoding: Encoding;
}

interface ArtifactField {
  /** The field's path in the result; `*` is every element of an array. */
  path: readonly string[];
  encoding: Encoding;
  contentType: (result: Record<string, unknown>) => string;
  /** Stored whatever its size (images), rather than from ARTIFACT_MIN_BYTES. */
  always?: boolean;
}

const png = () => 'image/png';
const html = () => 'text/html; charset=utf-8';
const textOf = (format: unknown) => (format === 'html' ? html() : 'text/markdown; charset=utf-8');

const ARTIFACT_FIELDS: Record<string, readonly ArtifactField[]> = {
  screenshot: [{ path: ['image_base64'], encoding: 'base64', contentType: png, always: true }],
  page_snapshot: [
    { path: ['snapshot'], encoding: 'utf8', contentType: (result) => textOf(result.snapshot_format) },
    { path: ['actions', 'screenshots', '*'], encoding: 'base64', contentType: png, always: true },
    { path: ['actions', 'scrapes', '*', 'html'], encoding: 'utf8', contentType: html },
  ],
  proxy_fetch: [{ path: ['content'], encoding: 'utf8', contentType: (result) => textOf(result.content_type) }],
};

const REFERENCE = '$artifact';

export const isArtifactReference = (value: unknown): value is { [REFERENCE]: ArtifactReference } =>
  typeof value === 'object' && value !== null && !Array.isArray(value) && REFERENCE in value;

const bytesOf = (text: string, encoding: Encoding) => Buffer.from(text, encoding === 'base64' ? 'base64' : 'utf8');

/** Visits the values at a field's path (array elements for `*`), with their names (`actions.screenshots.2`). */
function visit(
  value: unknown,
  path: readonly string[],
  name: string[],
  found: (holder: Record<string, unknown> | unknown[], key: string | number, name: string) => void,
): void {
  if (typeof value !== 'object' || value === null) return;
  const [head, ...rest] = path;
  if (head === undefined) return;
  const keys: Array<string | number> =
    head === '*' ? (Array.isArray(value) ? value.map((_, index) => index) : []) : Array.isArray(value) ? [] : [head];
  for (const key of keys) {
    const child = (value as Record<string | number, unknown>)[key];
    if (rest.length === 0) found(value as Record<string, unknown>, key, [...name, String(key)].join('.'));
    else visit(child, rest, [...name, String(key)], found);
  }
}

/** A copy deep enough to replace fields in without touching the solver's result. */
const copyOf = <T>(value: T): T => structuredClone(value);

/**
 * Writes the large parts of a result to the store under `tasks/<taskId>/<scope>/<field>` and returns the
 * top-level fields that changed, with references in place of those parts, and the keys written. A write that
 * fails throws: the caller
 * fails the attempt, and nothing that says completed lacks its bytes.
 */
export async function storeArtifacts(
  store: ArtifactStore,
  input: { taskId: string; scope: string; taskType: string; result: Record<string, unknown> },
): Promise<{ parts: Record<string, unknown>; keys: string[] }> {
  const fields = ARTIFACT_FIELDS[input.taskType];
  if (!fields) return { parts: {}, keys: [] };
  const stored = copyOf(input.result);
  const writes: Array<Promise<void>> = [];
  const keys: string[] = [];
  const changed = new Set<string>();
  const scope = input.scope.replace(/[^A-Za-z0-9._-]/g, '-');
  for (const field of fields) {
    visit(stored, field.path, [], (holder, key, name) => {
      const value = (holder as Record<string | number, unknown>)[key];
      if (typeof value !== 'string') return;
      const bytes = bytesOf(value, field.encoding);
      if (!field.always && bytes.length < ARTIFACT_MIN_BYTES) return;
      const storeKey = `tasks/${input.taskId}/${scope}/${name}`;
      keys.push(storeKey);
      changed.add(field.path[0]!);
      writes.push(
        store.put(storeKey, bytes, field.contentType(input.result)).then((artifact) => {
          (holder as Record<string | number, unknown>)[key] = {
            [REFERENCE]: { ...artifact, encoding: field.encoding },
          };
        }),
      );
    });
  }
  const outcomes = await Promise.allSettled(writes);
  const failed = outcomes.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
  if (failed) {
    // What was written is of no use without the rest.
    await store.delete(keys).catch(() => undefined);
    throw failed.reason;
  }
  return { parts: Object.fromEntries([...changed].map((key) => [key, stored[key]])), keys };
}

/** The keys of every artifact a stored result refers to. */
export function artifactKeysOf(result: unknown): string[] {
  if (isArtifactReference(result)) return [result[REFERENCE].key];
  if (Array.isArray(result)) return result.flatMap(artifactKeysOf);
  if (typeof result === 'object' && result !== null) return Object.values(result).flatMap(artifactKeysOf);
  return [];
}

/** The result with every reference replaced by its bytes, encoded as the field holds them. */
export async function resolveArtifacts<T>(store: ArtifactStore, result: T): Promise<T> {
  if (artifactKeysOf(result).length === 0) return result;
  const expand = async (value: unknown): Promise<unknown> => {
    if (isArtifactReference(value)) {
      const artifact = value[REFERENCE];
      return (await store.get(artifact.key)).toString(artifact.encoding === 'base64' ? 'base64' : 'utf8');
    }
    if (Array.isArray(value)) return Promise.all(value.map(expand));
    if (typeof value === 'object' && value !== null) {
      const entries = await Promise.all(
        Object.entries(value).map(async ([key, item]) => [key, await expand(item)] as const),
      );
      return Object.fromEntries(entries);
    }
    return value;
  };
  return (await expand(result)) as T;
}

/**
 * One large part of a stored result as bytes, by its field name (`image_base64`,
 * `actions.screenshots.0`): from the store, or decoded from the row when it was kept there. Null when the
 * result has no such part.
 */
export async function artifactOf(
  store: ArtifactStore,
  taskType: string,
  result: Record<string, unknown>,
  name: string,
): Promise<{ bytes: Buffer; contentType: string; sha256?: string } | null> {
  for (const field of ARTIFACT_FIELDS[taskType] ?? []) {
    let found:
      | { bytes: Buffer; contentType: string; sha256?: string }
      | Promise<{ bytes: Buffer; contentType: string; sha256?: string }>
      | null = null;
    visit(result, field.path, [], (holder, key, fieldName) => {
      if (fieldName !== name) return;
      const value = (holder as Record<string | number, unknown>)[key];
      if (isArtifactReference(value)) {
        const artifact = value[REFERENCE];
        found = store
          .get(artifact.key)
          .then((bytes) => ({ bytes, contentType: artifact.content_type, sha256: artifact.sha256 }));
      } else if (typeof value === 'string') {
        found = { bytes: bytesOf(value, field.encoding), contentType: field.contentType(result) };
      }
    });
    if (found) return found;
  }
  return null;
}
