import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ARTIFACT_MIN_BYTES, artifactKeysOf, artifactOf, resolveArtifacts, storeArtifacts } from '../../src/artifacts/results';
import { ArtifactMissingError, DirectoryArtifactStore, type ArtifactStore, type StoredArtifact } from '../../src/artifacts/store';

describe('the artifact store and the references results keep to it', () => {
  let dir: string;
  let store: DirectoryArtifactStore;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'artifacts-'));
    store = new DirectoryArtifactStore(dir);
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('the directory store keeps bytes under their key, reports size and digest, and deletes idempotently', async () => {
    const bytes = crypto.randomBytes(5000);
    const stored = await store.put('tasks/t1/a1/image_base64', bytes, 'image/png');
    expect(stored).toEqual({ key: 'tasks/t1/a1/image_base64', size: 5000, sha256: crypto.createHash('sha256').update(bytes).digest('hex'), content_type: 'image/png' });
    expect((await store.get(stored.key)).equals(bytes)).toBe(true);
    const other = await store.put('tasks/t1/a2/image_base64', bytes, 'image/png');
    await store.delete([stored.key, 'tasks/t1/a1/never-written']);
    await expect(store.get(stored.key)).rejects.toBeInstanceOf(ArtifactMissingError);
    // An emptied folder goes; one still holding a file stays, and so does the store's own.
    expect(fs.existsSync(path.join(store.location, 'tasks/t1/a1'))).toBe(false);
    expect((await store.get(other.key)).equals(bytes)).toBe(true);
    await store.delete([other.key]);
    expect(fs.existsSync(path.join(store.location, 'tasks'))).toBe(false);
    expect(fs.existsSync(store.location)).toBe(true);
    await expect(store.put('../outside', bytes, 'image/png')).rejects.toThrow('invalid artifact key');
  });

  test('a screenshot and large bodies become references; small bodies stay; resolving gives the result back', async () => {
    const png = crypto.randomBytes(300).toString('base64');
    const shot = { mime_type: 'image/png', image_base64: png, width: 1, height: 1 };
    const storedShot = await storeArtifacts(store, { taskId: 't1', scope: 't1:1', taskType: 'screenshot', result: shot });
    expect(storedShot.keys).toEqual(['tasks/t1/t1-1/image_base64']);
    expect(storedShot.parts.image_base64).toEqual({ $artifact: expect.objectContaining({ key: 'tasks/t1/t1-1/image_base64', size: 300, encoding: 'base64' }) });
    expect(await resolveArtifacts(store, { ...shot, ...storedShot.parts })).toEqual(shot);

    const large = 'x'.repeat(ARTIFACT_MIN_BYTES);
    const snapshot = {
      url: 'https://example.com',
      snapshot: large,
      snapshot_format: 'html',
      actions: { screenshots: [png, png], scrapes: [{ url: 'https://example.com', html: 'small' }], javascript_returns: [] },
    };
    const storedPage = await storeArtifacts(store, { taskId: 't2', scope: 'admin', taskType: 'page_snapshot', result: snapshot });
    expect(storedPage.keys.sort()).toEqual(['tasks/t2/admin/actions.screenshots.0', 'tasks/t2/admin/actions.screenshots.1', 'tasks/t2/admin/snapshot']);
    const row = { ...snapshot, ...storedPage.parts };
    expect(row.actions.scrapes[0]!.html).toBe('small');
    expect(snapshot.actions.screenshots[0]).toBe(png);
    expect(artifactKeysOf(row).sort()).toEqual(storedPage.keys.sort());
    expect(await resolveArtifacts(store, row)).toEqual(snapshot);
    expect(await artifactOf(store, 'page_snapshot', row, 'actions.screenshots.1')).toMatchObject({ bytes: Buffer.from(png, 'base64'), contentType: 'image/png' });
    expect(await artifactOf(store, 'page_snapshot', row, 'snapshot')).toMatchObject({ contentType: 'text/html; charset=utf-8' });
    expect(await artifactOf(store, 'page_snapshot', row, 'actions.scrapes.0.html')).toMatchObject({ bytes: Buffer.from('small') });
    expect(await artifactOf(store, 'page_snapshot', row, 'title')).toBeNull();

    const small = { url: 'u', final_url: 'u', status_code: 200, content_type: 'markdown', content: '# small' };
    expect(await storeArtifacts(store, { taskId: 't3', scope: 'a', taskType: 'proxy_fetch', result: small })).toEqual({ parts: {}, keys: [] });
  });

  test('a write that fails throws and leaves none of the result\'s other objects behind', async () => {
    const deleted: string[] = [];
    const failing: ArtifactStore = {
      location: 'failing',
      put: async (key, bytes, contentType): Promise<StoredArtifact> => {
        if (key.endsWith('.1')) throw new Error('disk full');
        return store.put(key, bytes, contentType);
      },
      get: (key) => store.get(key),
      delete: async (keys) => {
        deleted.push(...keys);
        await store.delete(keys);
      },
    };
    const png = Buffer.from('png').toString('base64');
    const result = { url: 'u', snapshot: 's', snapshot_format: 'html', actions: { screenshots: [png, png], scrapes: [], javascript_returns: [] } };
    await expect(storeArtifacts(failing, { taskId: 't4', scope: 'a', taskType: 'page_snapshot', result })).rejects.toThrow('disk full');
    expect(deleted.sort()).toEqual(['tasks/t4/a/actions.screenshots.0', 'tasks/t4/a/actions.screenshots.1']);
    await expect(store.get('tasks/t4/a/actions.screenshots.0')).rejects.toBeInstanceOf(ArtifactMissingError);
  });
});
