import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { npmScriptNodeArgs } from '../../scripts/npm-script';
import { OPEN_ADDRESS_LIMITS_ENV, serviceDataDirEnv } from './stack';

const ROOT = path.resolve(__dirname, '../..');

export interface NodeProcess {
  child: ChildProcess;
  output: string[];
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Runs `npm run api` / `npm run worker` / `npm run solver` entry points as real separate processes and waits until they serve.
 * `entryFile` runs another entry file with the script's node flags (test/support/drill-worker.ts).
 */
export async function spawnNode(
  entry: 'api' | 'worker' | 'solver',
  env: Record<string, string>,
  readyPattern: RegExp,
  timeoutMs = 60_000,
  entryFile?: string,
): Promise<NodeProcess> {
  const args = npmScriptNodeArgs(entry);
  if (entryFile) args[args.length - 1] = entryFile;
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'info', ...OPEN_ADDRESS_LIMITS_ENV, ...serviceDataDirEnv(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group, as a terminal or container gives it; a signal goes to the whole group.
    detached: true,
  });
  const output: string[] = [];
  const kill = (signal: NodeJS.Signals = 'SIGTERM') =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      process.kill(-child.pid!, signal);
    });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${entry} did not start in time:\n${output.join('')}`)), timeoutMs);
    const onData = (chunk: Buffer) => {
      output.push(chunk.toString());
      if (readyPattern.test(chunk.toString())) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${entry} exited with ${code}:\n${output.join('')}`));
    });
  });
  return { child, output, kill };
}
