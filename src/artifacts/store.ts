import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { DeleteObjectsCommand, GetObjectCommand, NoSuchKey, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';

/**
 * Where large parts of task results live (screenshots, page bodies): out of PostgreSQL, so the primary
 * database, its backups and replicas do not carry them. Keys are chosen by the caller
 * (src/artifacts/results.ts); a put of the same key replaces the object.
 */
export interface ArtifactStore {
  /** Where the store keeps its objects, for logs and the start-up banner. */
  readonly location: string;
  put(key: string, bytes: Buffer, contentType: string): Promise<StoredArtifact>;
  /** The object's bytes; `ArtifactMissingError` when there is none under the key. */
  get(key: string): Promise<Buffer>;
  /** Deletes the objects; a key with no object is not an error (deletes are retried by the purge). */
  delete(keys: readonly string[]): Promise<void>;
}

/** What a put stored: the row keeps it as the result field's reference. */
export interface StoredArtifact {
  key: string;
  size: number;
  sha256: string;
  content_type: string;
}

export class ArtifactMissingError extends Error {
  constructor(readonly key: string) {
    super(`artifact ${key} is missing from the store`);
  }
}

export const sha256Of = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** Keys are made of task and attempt ids and field names; anything else could leave the directory. */
const SAFE_KEY = /^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/;
function checkedKey(key: string): string {
  if (!SAFE_KEY.test(key) || key.split('/').some((part) => part === '..' || part === '.'))
    throw new Error(`invalid artifact key "${key}"`);
  return key;
}

/** The embedded default: one file per object under a directory (DATA_DIR/artifacts). */
export class DirectoryArtifactStore implements ArtifactStore {
  constructor(private readonly dir: string) {}

  get location() {
    return this.dir;
  }

  async put(key: string, bytes: Buffer, contentType: string): Promise<StoredArtifact> {
    const file = path.join(this.dir, checkedKey(key));
    // Written aside and renamed, so a reader never sees half an object. A delete emptying the same
    // folders (delete, below) may remove one between mkdir and write: the write then goes again.
    const partial = `${file}.${randomBytes(6).toString('hex')}.partial`;
    for (let tries = 1; ; tries++) {
      await fs.mkdir(path.dirname(file), { recursive: true });
      try {
        await fs.writeFile(partial, bytes);
        await fs.rename(partial, file);
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || tries >= 3) throw error;
      }
    }
    return { key, size: bytes.length, sha256: sha256Of(bytes), content_type: contentType };
  }

  async get(key: string): Promise<Buffer> {
    try {
      return await fs.readFile(path.join(this.dir, checkedKey(key)));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new ArtifactMissingError(key);
      throw error;
    }
  }

  async delete(keys: readonly string[]): Promise<void> {
    for (const key of keys) {
      const root = path.resolve(this.dir);
      const file = path.join(root, checkedKey(key));
      await fs.rm(file, { force: true });
      // A purged task's folders (tasks/<id>/<attempt>/) go with its last file; a folder still holding
      // another file stays. A purged task is never written again, so no put races the removal.
      for (let dir = path.dirname(file); dir.startsWith(root + path.sep); dir = path.dirname(dir)) {
        try {
          await fs.rmdir(dir);
        } catch {
          break;
        }
      }
    }
  }
}

export interface S3Settings {
  bucket: string;
  /** An S3-compatible server's URL (MinIO, moto); unset for AWS itself. */
  endpoint?: string;
  region: string;
  credentials?: { accessKeyId: string; secretAccessKey: string };
}

// DeleteObjects takes at most 1,000 keys a request.
const S3_DELETE_BATCH = 1000;

/** Objects in an S3 bucket, through the AWS SDK; path-style addressing whenever an endpoint is named (MinIO, moto). */
export class S3ArtifactStore implements ArtifactStore {
  private readonly client: S3Client;

  constructor(private readonly settings: S3Settings) {
    this.client = new S3Client({
      region: settings.region,
      ...(settings.endpoint ? { endpoint: settings.endpoint, forcePathStyle: true } : {}),
      ...(settings.credentials ? { credentials: settings.credentials } : {}),
    });
  }

  get location() {
    return `s3://${this.settings.bucket}${this.settings.endpoint ? ` at ${this.settings.endpoint}` : ''}`;
  }

  async put(key: string, bytes: Buffer, contentType: string): Promise<StoredArtifact> {
    const sha256 = sha256Of(bytes);
    // The server checks the body against its digest, so a stored object is the bytes the row describes.
    await this.client.send(
      new PutObjectCommand({
        Bucket: this.settings.bucket,
        Key: checkedKey(key),
        Body: bytes,
        ContentType: contentType,
        ChecksumSHA256: Buffer.from(sha256, 'hex').toString('base64'),
      }),
    );
    return { key, size: bytes.length, sha256, content_type: contentType };
  }

  async get(key: string): Promise<Buffer> {
    try {
      const object = await this.client.send(
        new GetObjectCommand({ Bucket: this.settings.bucket, Key: checkedKey(key) }),
      );
      return Buffer.from(await object.Body!.transformToByteArray());
    } catch (error) {
      if (error instanceof NoSuchKey || (error as { name?: string }).name === 'NoSuchKey')
        throw new ArtifactMissingError(key);
      throw error;
    }
  }

  async delete(keys: readonly string[]): Promise<void> {
    for (let start = 0; start < keys.length; start += S3_DELETE_BATCH) {
      const batch = keys.slice(start, start + S3_DELETE_BATCH).map((key) => ({ Key: checkedKey(key) }));
      const answer = await this.client.send(
        new DeleteObjectsCommand({ Bucket: this.settings.bucket, Delete: { Objects: batch, Quiet: true } }),
      );
      const failed = answer.Errors?.filter((error) => error.Code !== 'NoSuchKey') ?? [];
      if (failed.length > 0)
        throw new Error(
          `the store did not delete ${failed.length} artifact(s): ${failed[0]!.Code} ${failed[0]!.Message ?? ''}`,
        );
    }
  }

  close() {
    this.client.destroy();
  }
}

/** The store the configuration names: an S3 bucket when ARTIFACT_S3_BUCKET is set, else DATA_DIR/artifacts. */
export function createArtifactStore(config: { dataDir: string; artifactS3?: S3Settings }): ArtifactStore {
  return config.artifactS3
    ? new S3ArtifactStore(config.artifactS3)
    : new DirectoryArtifactStore(path.join(config.dataDir, 'artifacts'));
}
