import path from 'node:path';
import express, { Router, type RequestHandler } from 'express';
import { solverJsonSchemas } from '../../schemas/json-schema';

/** Where the console's page, styles and modules are: plain files, served as they are (no build step). */
const CONSOLE_DIR = path.resolve(__dirname, '../../console');

/**
 * Only this origin's own scripts, styles and connections; images also from data: URLs (screenshots
 * are shown from the results' base64). No inline script or style, no frames, no plugins.
 */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const consoleHeaders: RequestHandler = (_req, res, next) => {
  res.setHeader('Content-Security-Policy', CONSOLE_CSP);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Referrer-Policy', 'no-referrer');
  res.setHeader('X-Frame-Options', 'DENY');
  // The keys live in the tab; the page itself holds nothing private, but a new version must show at once.
  res.setHeader('Cache-Control', 'no-cache');
  next();
};

/** The market console (docs/console.md): static files that act only through the API's own routes. */
export function consoleRoutes(): Router {
  const router = Router();
  router.get(['/console', '/console/'], consoleHeaders, (_req, res) => {
    res.sendFile(path.join(CONSOLE_DIR, 'index.html'));
  });
  // The result schemas the manual-completion form checks against: the document in docs/solver-schemas.json.
  router.get('/console/solver-schemas.json', consoleHeaders, (_req, res) => {
    res.json(solverJsonSchemas());
  });
  router.use(
    '/console',
    consoleHeaders,
    express.static(CONSOLE_DIR, { index: false, redirect: false, dotfiles: 'ignore' }),
  );
  return router;
}
