import { firecrawlFailure, planScrape, timeoutSecondsOf, withScheme } from '../../src/compat/firecrawl';
import { MOBILE_VIEWPORT, planScrapeV2 } from '../../src/compat/firecrawl-v2';
import { cleanHtml, extractLinks, isValidSelector, pageMetadata } from '../../src/compat/page-html';

describe('Firecrawl scrape semantics', () => {
  test('formats map to the fewest tasks: html, rawHtml and links share one raw fetch', () => {
    expect(planScrape(['markdown'])).toEqual({ markdown: true, rawHtml: false, screenshot: null });
    expect(planScrape(['html', 'links', 'rawHtml'])).toEqual({ markdown: false, rawHtml: true, screenshot: null });
    expect(planScrape(['screenshot'])).toEqual({ markdown: false, rawHtml: false, screenshot: { fullPage: false } });
    expect(planScrape(['markdown', 'screenshot@fullPage'])).toEqual({ markdown: true, rawHtml: false, screenshot: { fullPage: true } });
  });

  test('timeouts are milliseconds rounded up to whole seconds; URLs without a scheme get http', () => {
    expect(timeoutSecondsOf(30_000)).toBe(30);
    expect(timeoutSecondsOf(1)).toBe(1);
    expect(timeoutSecondsOf(1_001)).toBe(2);
    expect(timeoutSecondsOf(null)).toBeUndefined();
    expect(withScheme('example.com/a')).toBe('http://example.com/a');
    expect(withScheme(' https://example.com ')).toBe('https://example.com');
    expect(withScheme('ftp://example.com')).toBe('ftp://example.com');
  });

  test.each([
    [403, 403, 'domain_blocked'],
    [429, 429, 'rate_limited'],
    [502, 500, 'solver_failed'],
    [503, 503, 'no_solver_available'],
    [504, 408, 'task_timeout'],
  ])('our %i becomes Firecrawl\'s %i (%s) with success:false', (ours, theirs, type) => {
    expect(firecrawlFailure(ours, { error: { type, message: 'why', task_id: 't1' } })).toEqual({
      status: theirs,
      body: { success: false, error: 'why', code: type, task_id: 't1' },
    });
  });

  test('a validation body keeps 422 and its detail, and gains success and error', () => {
    const detail = [{ type: 'missing', loc: ['body', 'url'], msg: 'Field required' }];
    expect(firecrawlFailure(422, { detail })).toEqual({ status: 422, body: { success: false, error: 'Bad Request: body.url: Field required', detail } });
  });

  const page = `<html lang="de"><head><TITLE>T</TITLE><META NAME="Description" content="d"><base href="https://cdn.example.com/root/"></head>
    <body><header>top</header><p>keep <a href="x.html">x</a> <img src="/i.png"> <a href="mailto:a@b.c">mail</a></p><aside>side</aside></body></html>`;

  test('metadata comes from the head, whatever the case of its tags', () => {
    expect(pageMetadata(page)).toEqual({ title: 'T', language: 'de', description: 'd' });
  });

  test('html and links resolve against <base>, and chrome is removed only with onlyMainContent', () => {
    const main = cleanHtml(page, 'https://example.com/page', true);
    expect(main).toContain('href="https://cdn.example.com/root/x.html"');
    expect(main).toContain('src="https://cdn.example.com/i.png"');
    expect(main).toContain('href="mailto:a@b.c"');
    expect(main).not.toContain('top');
    expect(main).not.toContain('side');
    expect(cleanHtml(page, 'https://example.com/page', false)).toContain('<aside>side</aside>');
    expect(extractLinks(page, 'https://example.com/page')).toEqual(['https://cdn.example.com/root/x.html']);
  });
});

describe('Firecrawl v2 scrape semantics', () => {
  const url = 'https://example.com/a';

  test('formats as names or objects; markdown is the solver\'s unless tags filter it or the whole page is wanted', () => {
    expect(planScrapeV2({ url })).toMatchObject({ formats: ['markdown'], solverMarkdown: true, rawHtml: false, screenshot: null, onlyMainContent: true });
    expect(planScrapeV2({ url, formats: ['markdown', { type: 'html' }, 'links'] })).toMatchObject({ solverMarkdown: true, rawHtml: true });
    expect(planScrapeV2({ url, formats: ['markdown'], excludeTags: ['nav'] })).toMatchObject({ solverMarkdown: false, rawHtml: true, tags: { exclude: ['nav'] } });
    expect(planScrapeV2({ url, formats: ['markdown'], onlyMainContent: false })).toMatchObject({ solverMarkdown: false, rawHtml: true, onlyMainContent: false });
    expect(planScrapeV2({ url, formats: [{ type: 'screenshot', fullPage: true, viewport: { width: 800, height: 600 } }], waitFor: 250 }).screenshot).toEqual({
      full_page: true,
      viewport: { width: 800, height: 600 },
      wait_ms: 250,
    });
    expect(planScrapeV2({ url, formats: ['screenshot'], mobile: true }).screenshot).toEqual({ full_page: false, viewport: MOBILE_VIEWPORT });
  });

  test.each([['json'], ['summary'], ['changeTracking'], ['screenshot@fullPage']])('the %s format is refused, named', (format) => {
    const refusal = (() => {
      try {
        planScrapeV2({ url, formats: ['markdown', format === 'json' ? { type: 'json', prompt: 'p' } : format] });
      } catch (error) {
        return error as { type: string; status: number; message: string; extra: Record<string, unknown> };
      }
      return undefined;
    })();
    expect(refusal).toMatchObject({ type: 'unsupported_format', status: 400, extra: { format } });
    expect(refusal!.message).toContain(`"${format}" format is not supported`);
  });

  test('includeTags keeps only the outermost matching elements; excludeTags removes', () => {
    const html = '<html><body><nav>menu</nav><article><p class="x">one</p><aside>side</aside></article><p class="x">two</p></body></html>';
    expect(cleanHtml(html, url, false, { include: ['article', '.x'] })).toBe('<article><p class="x">one</p><aside>side</aside></article><p class="x">two</p>');
    expect(cleanHtml(html, url, false, { include: ['article'], exclude: ['aside'] })).toBe('<article><p class="x">one</p></article>');
    expect(isValidSelector('div > p.x')).toBe(true);
    expect(isValidSelector('p[[')).toBe(false);
  });

  test('a refused value is named in the error message of a validation failure', () => {
    const detail = [{ type: 'literal_error', loc: ['body', 'formats', 1], msg: "Input should be 'markdown'", input: 'extract' }];
    expect(firecrawlFailure(422, { detail }).body).toMatchObject({ error: 'Bad Request: body.formats.1: Input should be \'markdown\' (got "extract")' });
  });
});
