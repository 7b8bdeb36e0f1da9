import { continueAsNew, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { CrawlWorkflowInput, CrawlWorkflowResult } from '../src/contract/workflows';

// A slice crawls many pages and heartbeats every fraction of a second: a lost worker is noticed within
// the heartbeat timeout (an attempt's dispatch allows a node the same 10 s) and the slice is retried (it
// takes up its running pages again) elsewhere.
const crawl = proxyActivities<Activities>({
  startToCloseTimeout: '6 hours',
  heartbeatTimeout: '10 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds' },
});

// Pages per activity call, and calls per workflow run before it continues as new: each call adds a
// handful of events, so a run's history stays small whatever the crawl's size.
export const PAGES_PER_SLICE = 500;
export const SLICES_PER_RUN = 10;

/**
 * A crawl or batch scrape: discovery once, then slices of pages, each page an ordinary web task created
 * and awaited by the slice's activity (docs/crawl.md). The job's state is in PostgreSQL, so the
 * workflow carries only its id; a cancel is written there and seen by the running slice.
 */
export async function crawlWorkflow(input: CrawlWorkflowInput): Promise<CrawlWorkflowResult> {
  if (!input.seeded) await crawl.seedCrawl({ crawlId: input.crawlId });
  for (let slice = 0; slice < SLICES_PER_RUN; slice++) {
    const { done } = await crawl.runCrawlSlice({ crawlId: input.crawlId, budget: PAGES_PER_SLICE });
    if (done) return { crawlId: input.crawlId };
  }
  return continueAsNew<typeof crawlWorkflow>({ crawlId: input.crawlId, seeded: true });
}
