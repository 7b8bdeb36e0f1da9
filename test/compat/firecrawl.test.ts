import { firecrawlFailure, timeoutSecondsOf, withScheme } from '../../src/compat/firecrawl';
import { parseActions } from '../../src/compat/firecrawl-actions';
import { MOBILE_VIEWPORT, planScrapeV2, renderPayload } from '../../src/compat/firecrawl-v2';
import { renderReason } from '../../src/compat/render-policy';
import { assertScrapeOptions, SCRAPE_OPTIONS } from '../../src/compat/scrape-options';
import { cleanHtml, extractLinks, isValidSelector, pageMetadata } from '../../src/compat/page-html';

describe('Firecrawl scrape semantics', () => {
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

  test('formats as names or objects; content formats share one page, rendered always for waitFor and actions', () => {
    expect(planScrapeV2({ url })).toMatchObject({ formats: ['markdown'], content: true, render: 'when_needed', screenshot: null, onlyMainContent: true, removeBase64Images: true });
    expect(planScrapeV2({ url, formats: ['markdown', { type: 'html' }, 'links'] })).toMatchObject({ content: true });
    expect(planScrapeV2({ url, formats: ['screenshot'] })).toMatchObject({ content: false, render: 'when_needed' });
    expect(planScrapeV2({ url, formats: ['markdown'], excludeTags: ['nav'] })).toMatchObject({ tags: { exclude: ['nav'] } });
    expect(planScrapeV2({ url, waitFor: 10 })).toMatchObject({ render: 'always', waitMs: 10 });
    const clicked = planScrapeV2({ url, formats: ['markdown', 'screenshot'], mobile: true }, [{ type: 'click', selector: '#more' }]);
    expect(clicked.render).toBe('always');
    // The screenshot format is the last action, taken after the others, at the page's viewport.
    expect(renderPayload(url, clicked)).toEqual({ url, mode: 'html', viewport: MOBILE_VIEWPORT, actions: [{ type: 'click', selector: '#more' }, { type: 'screenshot', fullPage: false }] });
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

describe('Firecrawl options, actions and the render policy', () => {
  const refusal = (run: () => unknown) => {
    try {
      run();
    } catch (error) {
      return error as { type: string; status: number; message: string; extra: Record<string, unknown> };
    }
    return undefined;
  };

  test('every refused option and every unknown key is a 400 naming it; harmless ones pass', () => {
    expect(refusal(() => assertScrapeOptions({ url: 'x', origin: 'js-sdk@4', maxAge: 1000, blockAds: true, proxy: 'basic', headers: {}, parsers: ['pdf'] }, 'v2'))).toBeUndefined();
    expect(refusal(() => assertScrapeOptions({ url: 'x', location: { country: 'DE' } }, 'v2'))).toBeUndefined();
    for (const [option, value] of [['location', { country: 'DE', languages: ['de-DE'] }], ['proxy', 'stealth'], ['headers', { Cookie: 'a=b' }], ['minAge', 1], ['zeroDataRetention', true], ['useMock', 'x'], ['profile', { name: 'p' }]] as const) {
      expect(refusal(() => assertScrapeOptions({ url: 'x', [option]: value }, 'v2'))).toMatchObject({ type: 'unsupported_option', status: 400, extra: { option } });
    }
    expect(refusal(() => assertScrapeOptions({ url: 'x', fooBar: 1 }, 'v2'))).toMatchObject({ type: 'unsupported_option', extra: { option: 'fooBar' }, message: expect.stringContaining('Unrecognized key') });
    // An option of the other version is unknown to this one.
    expect(refusal(() => assertScrapeOptions({ url: 'x', jsonOptions: {} }, 'v2'))).toMatchObject({ extra: { option: 'jsonOptions' } });
    expect(refusal(() => assertScrapeOptions({ url: 'x', changeTrackingOptions: {} }, 'v1'))).toMatchObject({ extra: { option: 'changeTrackingOptions' }, message: expect.stringContaining('not supported') });
    // v1's extraction options are served (the json and extract formats).
    expect(() => assertScrapeOptions({ url: 'x', jsonOptions: { prompt: 'p' }, extract: { prompt: 'p' } }, 'v1')).not.toThrow();
    expect(Object.keys(SCRAPE_OPTIONS)).toEqual(expect.arrayContaining(['actions', 'location', 'parsers', 'maxAge', 'blockAds', 'removeBase64Images', 'skipTlsVerification']));
  });

  test('actions are checked one by one, the refused one named by index and type', () => {
    expect(parseActions([{ type: 'wait', milliseconds: 10 }, { type: 'click', selector: '#a' }, { type: 'executeJavascript', script: '1+1' }], 0)).toHaveLength(3);
    expect(refusal(() => parseActions([{ type: 'click', selector: '#a' }, { type: 'pdf' }], 0))).toMatchObject({ type: 'invalid_action', status: 400, extra: { action: 'pdf', index: 1 } });
    expect(refusal(() => parseActions([{ type: 'wait' }], 0))).toMatchObject({ extra: { action: 'wait', index: 0 } });
    expect(refusal(() => parseActions([{ type: 'wait', milliseconds: 5, selector: '#a' }], 0))).toMatchObject({ extra: { action: 'wait', index: 0 } });
    expect(refusal(() => parseActions([{ type: 'wait', milliseconds: 15_000 }, { type: 'wait', milliseconds: 4_000 }], 2_000))!.message).toContain('21000 ms');
    expect(refusal(() => parseActions([{ type: 'executeJavascript', script: 'x'.repeat(16_385) }], 0))).toMatchObject({ extra: { action: 'executeJavascript', index: 0 } });
    expect(refusal(() => parseActions(Array.from({ length: 51 }, () => ({ type: 'scrape' })), 0))).toMatchObject({ extra: { index: 50 } });
    expect(refusal(() => parseActions([{ type: 'click', selector: '#a', extra: 1 }], 0))!.message).toContain('"extra"');
  });

  test('a page is rendered when its scripts fill it: an empty app root, a noscript hint, or little text', () => {
    expect(renderReason('<html><body><h1>App</h1><div id="root"></div><p>More</p><script src="/app.js"></script></body></html>')).toBe('an empty application root');
    expect(renderReason('<html><body><noscript>You need to enable JavaScript to run this app.</noscript><p>x</p><script></script></body></html>')).toMatch(/noscript/);
    expect(renderReason('<html><body><p>Loading…</p><script src="/bundle.js"></script></body></html>')).toBe('little text and a script bundle');
    expect(renderReason(`<html><body><p>${'word '.repeat(60)}</p><script src="/bundle.js"></script></body></html>`)).toBeNull();
    // A short page with an inline snippet (analytics) is its own content.
    expect(renderReason('<html><body><p>Short page</p><script>window.tracking = 1</script></body></html>')).toBeNull();
    // Without scripts there is nothing to render.
    expect(renderReason('<html><body><div id="root"></div></body></html>')).toBeNull();
  });
});
