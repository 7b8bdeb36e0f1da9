/** A job is a crawl or a batch scrape; the same word starts its webhook events' types. */
export const CRAWL_KINDS = ['crawl', 'batch_scrape'] as const;
export type CrawlKind = (typeof CRAWL_KINDS)[number];

/**
 * Firecrawl's webhook events of a crawl or batch scrape: a request's `webhook.events` names them short
 * (`page`), a delivery's `type` in full (`crawl.page`, `batch_scrape.page`), the same in v1 and v2.
 */
export const CRAWL_EVENTS = ['started', 'page', 'completed', 'failed'] as const;
export type CrawlEvent = (typeof CRAWL_EVENTS)[number];
export type CrawlEventType = `${CrawlKind}.${CrawlEvent}`;

const EVENT_TYPE = new RegExp(`^(crawl|batch_scrape)\\.(${CRAWL_EVENTS.join('|')})$`);
export const isCrawlEventType = (value: unknown): value is CrawlEventType =>
  typeof value === 'string' && EVENT_TYPE.test(value);

/** A job's webhook as it is stored with the job. */
export interface CrawlWebhook {
  url: string;
  headers: Record<string, string>;
  metadata: Record<string, unknown>;
  events: CrawlEvent[];
}
