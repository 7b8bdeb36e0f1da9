import { parseRobots, robotsAllow } from '../../src/crawl/robots';
import { normaliseUrl, outOfScope, type CrawlScope } from '../../src/crawl/scope';
import { parseSitemap } from '../../src/crawl/sitemap';

const scope = (overrides: Partial<CrawlScope> = {}): CrawlScope => ({
  start: 'https://example.org/docs/intro.html',
  includePaths: [],
  excludePaths: [],
  crawlEntireDomain: false,
  allowSubdomains: false,
  allowExternalLinks: false,
  ignoreQueryParameters: false,
  regexOnFullURL: false,
  ...overrides,
});

describe('crawl scope', () => {
  test('normalising drops fragments and credentials (and the query when asked), and refuses other schemes', () => {
    expect(normaliseUrl('https://user:pw@Example.org/a#top', false)).toBe('https://example.org/a');
    expect(normaliseUrl('/b?x=1', true, 'https://example.org/a')).toBe('https://example.org/b');
    expect(normaliseUrl('javascript:alert(1)', false)).toBeNull();
    expect(normaliseUrl('mailto:a@example.org', false)).toBeNull();
  });

  test('by default only paths under the start URL\'s directory on its host (www. the same site)', () => {
    expect(outOfScope(scope(), 'https://example.org/docs/other.html')).toBeNull();
    expect(outOfScope(scope(), 'https://www.example.org/docs/deep/x.html')).toBeNull();
    expect(outOfScope(scope(), 'https://example.org/blog/')).toBe('path');
    expect(outOfScope(scope({ crawlEntireDomain: true }), 'https://example.org/blog/')).toBeNull();
    expect(outOfScope(scope(), 'https://api.example.org/docs/')).toBe('external');
    expect(outOfScope(scope({ allowSubdomains: true }), 'https://api.example.org/docs/')).toBeNull();
    // A look-alike host is not a subdomain.
    expect(outOfScope(scope({ allowSubdomains: true }), 'https://evilexample.org/docs/')).toBe('external');
    expect(outOfScope(scope({ allowExternalLinks: true }), 'https://elsewhere.net/')).toBeNull();
  });

  test('includePaths / excludePaths match the path (the whole URL with regexOnFullURL)', () => {
    const filtered = scope({ includePaths: ['^/docs/api/'], excludePaths: ['secret'] });
    expect(outOfScope(filtered, 'https://example.org/docs/api/a.html')).toBeNull();
    expect(outOfScope(filtered, 'https://example.org/docs/guide.html')).toBe('not_included');
    expect(outOfScope(filtered, 'https://example.org/docs/api/secret.html')).toBe('excluded');
    expect(outOfScope(scope({ includePaths: ['^https://example'] }), 'https://example.org/docs/a')).toBe('not_included');
    expect(outOfScope(scope({ includePaths: ['^https://example'], regexOnFullURL: true }), 'https://example.org/docs/a')).toBeNull();
  });
});

describe('robots.txt', () => {
  const text = 'User-agent: *\nDisallow: /private/\nAllow: /private/open$\nDisallow: /*.pdf$\n\nUser-agent: OtherBot\nDisallow: /\n\nSitemap: https://example.org/s.xml';

  test('the * group applies to us; the longest rule wins, Allow on a tie; wildcards and $ anchor', () => {
    const rules = parseRobots(text, 'Mozilla/5.0 (compatible; task-marketplace-solver/0.1)');
    expect(rules.sitemaps).toEqual(['https://example.org/s.xml']);
    expect(robotsAllow(rules, 'https://example.org/docs/')).toBe(true);
    expect(robotsAllow(rules, 'https://example.org/private/x')).toBe(false);
    expect(robotsAllow(rules, 'https://example.org/private/open')).toBe(true);
    expect(robotsAllow(rules, 'https://example.org/private/open/more')).toBe(false);
    expect(robotsAllow(rules, 'https://example.org/a/b.pdf')).toBe(false);
    expect(robotsAllow(rules, 'https://example.org/a/b.pdf?x')).toBe(true);
  });

  test('a group naming our agent replaces the * group', () => {
    expect(robotsAllow(parseRobots(text, 'OtherBot/2.0'), 'https://example.org/docs/')).toBe(false);
  });
});

test('a sitemap\'s URLs and a sitemap index\'s sitemaps, entities decoded', () => {
  expect(parseSitemap('<urlset><url><loc> https://e.org/a?x=1&amp;y=2 </loc></url><url><loc>https://e.org/b</loc></url></urlset>')).toEqual({ urls: ['https://e.org/a?x=1&y=2', 'https://e.org/b'], sitemaps: [] });
  expect(parseSitemap('<sitemapindex><sitemap><loc>https://e.org/s1.xml</loc></sitemap></sitemapindex>')).toEqual({ urls: [], sitemaps: ['https://e.org/s1.xml'] });
});
