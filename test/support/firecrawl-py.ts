import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Runs one call of a Firecrawl Python SDK (installed by scripts/ensure-tools.mjs --test into
 * .tools/python-sdks/) through test/support/firecrawl_sdk.py, and returns what it printed. The script
 * serves calls one at a time from its input and stays up a few seconds for the next: importing 4.x
 * costs more than a call. Each call makes its own client, as a user's program would.
 */

const root = path.resolve(__dirname, '..', '..');
export const FIRECRAWL_PY_MAJORS = [1, 4] as const;
type Major = (typeof FIRECRAWL_PY_MAJORS)[number];

export interface PythonSdkOutcome {
  version: string;
  result?: any;
  raised?: string;
  message?: string;
  status?: number | null;
}

// What firecrawl_sdk.py puts before each answer, so that anything the SDK prints itself is passed over.
const ANSWER = '@@firecrawl-sdk-answer@@ ';
const CALL_TIMEOUT_MS = 240_000;
// An idle interpreter ends this long after its last call.
const IDLE_MS = 5_000;

interface Interpreter {
  child: ChildProcessWithoutNullStreams;
  stdout: string;
  stderr: string;
  idle?: NodeJS.Timeout;
}

const idle = new Map<Major, Interpreter[]>();

function startInterpreter(major: Major): Interpreter {
  const python = path.join(root, '.tools', 'bin', 'python');
  const sdk = path.join(root, '.tools', 'python-sdks', `firecrawl-py-${major}`);
  const env = { ...process.env, PYTHONPATH: sdk, PYTHONDONTWRITEBYTECODE: '1', PYTHONUNBUFFERED: '1' };
  const child = spawn(python, [path.join(__dirname, 'firecrawl_sdk.py'), '--serve'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  const interpreter: Interpreter = { child, stdout: '', stderr: '' };
  child.stdout.on('data', (chunk: Buffer) => (interpreter.stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (interpreter.stderr += chunk.toString()));
  child.on('exit', () => {
    const list = idle.get(major) ?? [];
    if (list.includes(interpreter)) list.splice(list.indexOf(interpreter), 1);
  });
  // Never what keeps the test process alive.
  child.unref();
  for (const stream of [child.stdin, child.stdout, child.stderr]) (stream as unknown as { unref?: () => void }).unref?.();
  return interpreter;
}

export function runFirecrawlPy(major: Major, request: Record<string, unknown>): Promise<PythonSdkOutcome> {
  const sdk = path.join(root, '.tools', 'python-sdks', `firecrawl-py-${major}`);
  if (!fs.existsSync(path.join(sdk, '.installed'))) {
    return Promise.reject(new Error(`firecrawl-py ${major}.x is not installed: \`npm test\` installs it, or run \`node scripts/ensure-tools.mjs --test\``));
  }
  const interpreter = idle.get(major)?.pop() ?? startInterpreter(major);
  clearTimeout(interpreter.idle);
  const { child } = interpreter;
  interpreter.stdout = '';
  interpreter.stderr = '';
  return new Promise<PythonSdkOutcome>((resolve, reject) => {
    const finish = (error: Error | null, outcome?: PythonSdkOutcome) => {
      clearTimeout(timer);
      child.stdout.off('data', onData);
      child.off('exit', onExit);
      if (error) {
        child.kill('SIGKILL');
        return reject(error);
      }
      // Back to the idle ones, and ended if no call comes for it.
      interpreter.idle = setTimeout(() => child.stdin.end(), IDLE_MS).unref();
      idle.set(major, [...(idle.get(major) ?? []), interpreter]);
      resolve(outcome!);
    };
    const onData = () => {
      // Whole lines only: an answer may come in more than one chunk.
      const line = interpreter.stdout.split('\n').slice(0, -1).find((entry) => entry.startsWith(ANSWER));
      if (line === undefined) return;
      try {
        finish(null, JSON.parse(line.slice(ANSWER.length)) as PythonSdkOutcome);
      } catch {
        finish(new Error(`firecrawl-py ${major} printed no JSON: ${interpreter.stdout}\n${interpreter.stderr}`));
      }
    };
    const onExit = (code: number | null) => finish(new Error(`firecrawl-py ${major} failed: exited with ${code}\n${interpreter.stdout}\n${interpreter.stderr}`));
    const timer = setTimeout(() => finish(new Error(`firecrawl-py ${major} failed: no answer in ${CALL_TIMEOUT_MS} ms\n${interpreter.stderr}`)), CALL_TIMEOUT_MS);
    child.stdout.on('data', onData);
    child.once('exit', onExit);
    child.stdin.write(`${JSON.stringify(request)}\n`);
  });
}
