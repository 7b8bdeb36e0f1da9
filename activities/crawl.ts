import { Context } from '@temporalio/activity';
import type { ActivityDeps } from './deps';

/** A crawl workflow's steps (src/crawl/runner.ts); each is safe to run again after a lost worker. */
export function createCrawlActivities({ crawls }: ActivityDeps) {
  return {
    async seedCrawl(input: { crawlId: string }): Promise<void> {
      if (!crawls) throw new Error('this worker runs no crawls');
      await crawls.seed(input.crawlId);
    },
    async runCrawlSlice(input: { crawlId: string; budget: number }): Promise<{ done: boolean }> {
      if (!crawls) throw new Error('this worker runs no crawls');
      const context = Context.current();
      return crawls.runSlice(input.crawlId, input.budget, () => context.heartbeat(), context.cancellationSignal);
    },
  };
}
