import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';

export interface ServerProcess {
  child: ChildProcess;
  /** The start and the end of what it printed, for error messages (a crash names its cause first). */
  output(): string;
  /** Rejects when the process exits (or cannot be run at all). */
  exited: Promise<never>;
  stop(): Promise<void>;
}

// A Go panic prints its cause first and then a long trace; both ends are kept.
const OUTPUT_HEAD_CHARS = 4096;
const OUTPUT_TAIL_CHARS = 8192;

/**
 * Runs an embedded server in its own process group: a terminal's Ctrl-C then reaches only us, and we stop
 * it after the API and workers that use it. `stopSignal` asks it to shut down cleanly; SIGKILL follows
 * after the grace. Should we exit first, it gets the same request (and is not left running).
 */
export function spawnServer(
  command: string,
  args: string[],
  options: { stopSignal: NodeJS.Signals; graceMs?: number; spawn?: SpawnOptions },
): ServerProcess {
  const child = spawn(command, args, { ...options.spawn, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const stopWithUs = () => child.kill(options.stopSignal);
  process.once('exit', stopWithUs);
  const head: string[] = [];
  let headLength = 0;
  let tail = '';
  let skipped = false;
  const remember = (chunk: Buffer) => {
    let text = chunk.toString();
    if (headLength < OUTPUT_HEAD_CHARS) {
      const kept = text.slice(0, OUTPUT_HEAD_CHARS - headLength);
      head.push(kept);
      headLength += kept.length;
      text = text.slice(kept.length);
    }
    tail += text;
    if (tail.length > OUTPUT_TAIL_CHARS) {
      tail = tail.slice(-OUTPUT_TAIL_CHARS);
      skipped = true;
    }
  };
  child.stdout?.on('data', remember);
  child.stderr?.on('data', remember);
  const exited = new Promise<never>((_, reject) => {
    child.once('error', reject);
    child.once('exit', (code, signal) => reject(new Error(`${command} exited (${signal ?? `code ${code}`})`)));
  });
  exited.catch(() => undefined);
  child.once('exit', () => process.off('exit', stopWithUs));
  return {
    child,
    output: () => `${head.join('')}${skipped ? '\n…\n' : ''}${tail}`,
    exited,
    stop: () => stopChild(child, options.stopSignal, options.graceMs ?? 10_000),
  };
}

function stopChild(child: ChildProcess, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill(signal);
  });
}
