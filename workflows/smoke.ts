import { proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';

// A trivial round trip through the worker; used by the stack's self-check and the benchmark ceiling.
const { echo } = proxyActivities<Activities>({ startToCloseTimeout: '10 seconds' });

export async function smokeWorkflow(message: string): Promise<string> {
  return echo(message);
}
