import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { freePort } from './stack';

/**
 * A real S3-compatible server for the artifact store's tests: moto's `moto_server` (PyPI `moto[server]`,
 * installed into .tools/ by `npm test`), one process on a free port, its objects in memory.
 */
export interface MotoServer {
  endpoint: string;
  /** The environment that points the service at `bucket` on this server. */
  env(bucket: string): Record<string, string>;
  createBucket(bucket: string): Promise<void>;
  client(): S3Client;
  stop(): Promise<void>;
}

const MOTO_SERVER = path.resolve(__dirname, '../../.tools/bin/moto_server');
// moto accepts any key pair; these only have to be present.
const CREDENTIALS = { accessKeyId: 'test-access-key', secretAccessKey: 'test-secret-key' };

export async function startMoto(): Promise<MotoServer> {
  if (!fs.existsSync(MOTO_SERVER)) throw new Error(`${MOTO_SERVER} is missing: run \`node scripts/ensure-tools.mjs --test\``);
  const port = await freePort();
  const child: ChildProcess = spawn(MOTO_SERVER, ['-H', '127.0.0.1', '-p', String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let output = '';
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const endpoint = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`moto_server exited: ${output}`);
    const up = await fetch(`${endpoint}/`).then(() => true, () => false);
    if (up) break;
    if (Date.now() > deadline) {
      child.kill();
      throw new Error(`moto_server did not answer within 30 s: ${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  const client = () => new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true, credentials: CREDENTIALS });
  return {
    endpoint,
    env: (bucket) => ({
      ARTIFACT_S3_BUCKET: bucket,
      ARTIFACT_S3_ENDPOINT: endpoint,
      ARTIFACT_S3_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
      ARTIFACT_S3_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
    }),
    createBucket: async (bucket) => {
      const s3 = client();
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));
      s3.destroy();
    },
    client,
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    },
  };
}
