import { canarySummary, crawlSummary, shortTarget, taskSummary, verificationSummary, webhookSummary } from '../../src/tasks/workflow-summary';

/** The line each workflow shows in the Temporal UI's list (src/tasks/workflow-summary.ts). */
describe('workflow summaries', () => {
  test('a page task shows its URL as host and path only: no credentials, query or fragment', () => {
    expect(taskSummary({ task_type: 'screenshot', account_id: 'acct_1', payload: { url: 'https://user:pw@Example.com:8443/a/b?token=secret#x', viewport: { width: 1 } } })).toBe(
      'screenshot · acct_1 · `example.com:8443/a/b`',
    );
    expect(taskSummary({ task_type: 'proxy_fetch', account_id: 'acct_1', payload: { url: 'https://example.com/' } })).toBe('proxy_fetch · acct_1 · `example.com`');
    expect(shortTarget(`https://example.com/${'x'.repeat(200)}`)).toHaveLength(60);
    expect(shortTarget('not a url?with=query')).toBe('not a url');
  });

  test('a search shows its query cut short, on one line, in a code span it cannot leave', () => {
    const summary = taskSummary({ task_type: 'web_search', account_id: 'acct_2', payload: { query: 'one\ntwo `three` [link](http://x) and then a great deal more text' } });
    expect(summary).toBe('web_search · acct_2 · `one two three [link](http://x) and then…`');
    expect(summary).not.toContain('\n');
  });

  test('a chat shows its model, never its messages', () => {
    const summary = taskSummary({ task_type: 'chat_completion', account_id: 'acct_3', payload: { model: 'strong', messages: [{ role: 'user', content: 'private words' }] } });
    expect(summary).toBe('chat_completion · acct_3 · model `strong`');
  });

  test('platform tasks, crawls and webhook deliveries say what they are', () => {
    expect(canarySummary('page_snapshot', 'slv_1')).toBe('page_snapshot canary · platform · solver slv_1');
    expect(verificationSummary('proxy_fetch', 'task_1')).toBe('proxy_fetch verification run · platform · of task_1');
    expect(verificationSummary('proxy_fetch', 'task_1', 'third')).toBe('proxy_fetch verification run (third) · platform · of task_1');
    expect(crawlSummary({ kind: 'crawl', account_id: 'acct_4', url: 'https://docs.example.com/start?x=1' })).toBe('crawl · acct_4 · `docs.example.com/start`');
    expect(crawlSummary({ kind: 'batch_scrape', account_id: 'acct_4', url: null })).toBe('batch_scrape · acct_4');
    expect(webhookSummary('task.completed', 'task_9')).toBe('webhook task.completed · task_9');
  });
});
