/**
 * The URLs of a sitemap (`<urlset><url><loc>`) and the sitemaps a sitemap index names
 * (`<sitemapindex><sitemap><loc>`). Pure: the crawl activity fetches them.
 */
export function parseSitemap(xml: string): { urls: string[]; sitemaps: string[] } {
  const locs = (container: string) =>
    [...xml.matchAll(new RegExp(`<${container}\\b[^>]*>[\\s\\S]*?<loc>\\s*([^<]+?)\\s*</loc>`, 'gi'))].map((match) =>
      decodeEntities(match[1]!),
    );
  return { urls: locs('url'), sitemaps: locs('sitemap') };
}

function decodeEntities(text: string): string {
  return text
    .replace(/&amp;/g, '&')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'");
}
