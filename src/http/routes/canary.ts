import type { RequestHandler } from 'express';
import { isStorableText } from '../../schemas/text';
import { isCanaryHost, LOCAL_CANARY_DOMAIN } from '../../trust/canary-hosts';
import { siteOf, sitePage } from '../../trust/canary-pages';
import type { AppDeps } from '../deps';

/**
 * The canary sites (docs/trust.md, "Canary pages"): a request whose Host is a canary host name
 * (CANARY_HOSTS, or a name under localhost on a local stack) is answered as a small website would,
 * never by the API: the canary page at that host and path, the site's home and menu pages, a robots.txt,
 * or the site's own 404 page.
 * Mounted before everything else, so that nothing of the API shows on those names.
 */
export function canarySites(deps: AppDeps): RequestHandler {
  const { configured, local } = deps.config.canaryHosts;
  const hosts = local ? [{ host: LOCAL_CANARY_DOMAIN }] : configured;
  return async (req, res, next) => {
    if (hosts.length === 0 || !isCanaryHost(hosts, req.hostname ?? '')) return next();
    try {
      res.set('Cache-Control', 'no-store');
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.status(405).set('Allow', 'GET, HEAD').type('text').send('Method Not Allowed');
        return;
      }
      if (req.path === '/robots.txt') {
        res.type('text').send('User-agent: *\nAllow: /\n');
        return;
      }
      // No canary page's host or path holds a NUL (nor could PostgreSQL compare one): such a request is simply
      // not a page.
      const page =
        isStorableText(req.hostname) && isStorableText(req.path)
          ? ((await deps.trust.canaryPageAt(req.hostname, req.path)) ?? sitePage(req.hostname, req.path))
          : null;
      if (page) {
        res.type('html').send(page);
        return;
      }
      const site = siteOf(req.hostname);
      res
        .status(404)
        .type('html')
        .send(
          `<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Page not found | ${site.name}</title></head><body><h1>Page not found</h1><p>Sorry, this page does not exist. <a href="/">Back to ${site.name}</a></p></body></html>\n`,
        );
    } catch (error) {
      next(error);
    }
  };
}
