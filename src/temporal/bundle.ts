import fs from 'node:fs';
import path from 'node:path';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Logger } from '../logger';

export const WORKFLOWS_PATH = path.resolve(__dirname, '../../workflows/index.ts');

let bundle: Promise<WorkflowBundleWithSourceMap> | undefined;

/**
 * One workflow bundle per process (bundling takes seconds). A prebuilt bundle file
 * (WORKFLOW_BUNDLE_PATH) is used as is, so tests and benchmarks bundle once for many workers.
 */
export function workflowBundle(logger: Logger, prebuiltPath?: string): Promise<WorkflowBundleWithSourceMap> {
  if (prebuiltPath && fs.existsSync(prebuiltPath)) {
    return Promise.resolve({ code: fs.readFileSync(prebuiltPath, 'utf8') } as WorkflowBundleWithSourceMap);
  }
  bundle ??= bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: quietBundlerLogger(logger) });
  return bundle;
}

export async function writeWorkflowBundle(file: string, logger: Logger): Promise<void> {
  const { code } = await bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: quietBundlerLogger(logger) });
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, code);
}

function quietBundlerLogger(logger: Logger) {
  const log = (level: 'debug' | 'info' | 'warn' | 'error') => (message: string, meta?: Record<string, unknown>) =>
    logger[level === 'info' ? 'debug' : level]({ component: 'workflow-bundler', ...meta }, message);
  return {
    trace: log('debug'),
    debug: log('debug'),
    info: log('info'),
    warn: log('warn'),
    error: log('error'),
    log: (_level: string, message: string) => logger.debug(message),
  };
}
