import { proxyLocalActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';

/** Database bookkeeping is cheap and idempotent: local activities, retried briefly on transient errors. */
export const db = proxyLocalActivities<Activities>({
  startToCloseTimeout: '10 seconds',
  retry: {
    initialInterval: '100 milliseconds',
    backoffCoefficient: 2,
    maximumInterval: '2 seconds',
    maximumAttempts: 20,
  },
});
