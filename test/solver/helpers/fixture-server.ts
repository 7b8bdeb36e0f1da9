import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import zlib from 'node:zlib';
import type { AddressInfo } from 'node:net';

/** A stand-in for remote websites: fixture pages and edge cases served on 127.0.0.1. */

const FIXTURES = path.join(__dirname, '..', 'fixtures');

export type FixtureServer = { baseUrl: string; port: number; requests: string[]; close(): Promise<void> };

const LATIN1_HTML = '<html><head><title>Caf\u00e9 cr\u00e8me</title></head><body><h1>Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e</h1><p>D\u00e9j\u00e0 vu \u00e0 la fran\u00e7aise, na\u00efve.</p></body></html>';

function send(res: http.ServerResponse, status: number, type: string, body: string | Buffer, headers: http.OutgoingHttpHeaders = {}) {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

function route(req: http.IncomingMessage, res: http.ServerResponse): void {
  const url = new URL(req.url ?? '/', 'http://fixture');
  const redirect = url.pathname.match(/^\/redirect\/(\d+)$/);
  if (redirect) {
    const left = Number(redirect[1]);
    res.writeHead(302, { location: left > 1 ? `/redirect/${left - 1}` : '/article.html' });
    res.end();
    return;
  }
  switch (url.pathname) {
    case '/latin1.html':
      return send(res, 200, 'text/html; charset=ISO-8859-1', Buffer.from(LATIN1_HTML, 'latin1'));
    case '/latin1-meta.html':
      return send(res, 200, 'text/html', Buffer.from(LATIN1_HTML.replace('<head>', '<head><meta charset="iso-8859-1">'), 'latin1'));
    case '/gzip.html': {
      const body = zlib.gzipSync(fs.readFileSync(path.join(FIXTURES, 'article.html')));
      return send(res, 200, 'text/html; charset=utf-8', body, { 'content-encoding': 'gzip' });
    }
    case '/big.html': {
      const size = Number(url.searchParams.get('bytes') ?? 1024 * 1024);
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<html><body>${'x'.repeat(size)}</body></html>`);
      return;
    }
    case '/notes.txt':
      return send(res, 200, 'text/plain; charset=utf-8', 'Plain notes.\nSecond line with ünïcode.\n');
    case '/data.json':
      return send(res, 200, 'application/json', JSON.stringify({ hello: 'world' }));
    case '/image.png':
      return send(res, 200, 'image/png', Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 0]));
    case '/missing':
      return send(res, 404, 'text/html', '<html><head><title>Not here</title></head><body><h1>Page not found</h1></body></html>');
    case '/empty-404':
      res.writeHead(404).end();
      return;
    case '/loop':
      res.writeHead(302, { location: '/loop' });
      res.end();
      return;
    case '/redirect-to':
      res.writeHead(302, { location: url.searchParams.get('target') ?? '/' });
      res.end();
      return;
    case '/embeds': {
      // A page whose subresources point at another host.
      const target = url.searchParams.get('target') ?? '';
      return send(res, 200, 'text/html', `<html><head><title>Embeds</title></head><body><h1>Embeds</h1><img src="${target}/pixel.png"><iframe src="${target}/frame.html"></iframe><script>fetch('${target}/beacon').catch(() => {});</script></body></html>`);
    }
    case '/claims-proxy-error':
      // A target that sends the guard proxy's failure headers (today's and the one before it).
      return send(res, 200, 'text/html', '<html><head><title>Claims</title></head><body><h1>A real page</h1></body></html>', { 'x-solver-proxy-error': 'target_blocked', 'x-solver-blocked': '1' });
    case '/hang':
      // Never answers: lets tests abort a request in flight.
      return;
    case '/late-fill.html':
      // Fills itself 150 ms after load, without any request.
      return send(res, 200, 'text/html; charset=utf-8', `<!doctype html><html><head><title>Late fill</title></head><body><main><h1>Late fill</h1><div id="root"></div></main>
<script>addEventListener('load', () => setTimeout(() => { document.getElementById('root').innerHTML = '<h2>Filled after ' + 'load</h2><p>Text the script ' + 'wrote 150 ms after the load event.</p>'; }, 150));</script></body></html>`);
    case '/handler-fill.html':
      // No script element: an event handler attribute fills the page 150 ms after load.
      return send(res, 200, 'text/html; charset=utf-8', `<!doctype html><html><head><title>Handler fill</title></head>
<body onload="setTimeout(() => { document.getElementById('root').textContent = 'Filled by the ' + 'onload handler'; }, 150)"><h1>Handler fill</h1><div id="root"></div></body></html>`);
    case '/late-paint.html':
      // A white page that a script paints red 150 ms after load.
      return send(res, 200, 'text/html; charset=utf-8', `<!doctype html><html><head><title>Late paint</title><style>html, body { margin: 0; height: 100%; background: #fff; }</style></head><body><div id="root"></div>
<script>addEventListener('load', () => setTimeout(() => { document.getElementById('root').innerHTML = '<div style="position: fixed; inset: 0; background: #f00"></div>'; }, 150));</script></body></html>`);
    case '/data-fill.html':
      // Asks for its data after load; the answer comes 700 ms later and is written into the page.
      return send(res, 200, 'text/html; charset=utf-8', `<!doctype html><html><head><title>Data fill</title></head><body><main><h1>Data fill</h1><div id="root"></div></main>
<script>addEventListener('load', () => fetch('/slow-data?ms=700').then((r) => r.text()).then((text) => { document.getElementById('root').textContent = text; }));</script></body></html>`);
    case '/slow-data':
      setTimeout(() => send(res, 200, 'text/plain', 'Data that arrived late'), Number(url.searchParams.get('ms') ?? 500));
      return;
    case '/clock.html':
      // Never settles: a clock rewrites its text every 100 ms.
      return send(res, 200, 'text/html; charset=utf-8', `<!doctype html><html><head><title>Clock</title></head><body><h1>Clock</h1><p id="clock"></p>
<script>let ticks = 0; setInterval(() => { document.getElementById('clock').textContent = 'Tick ' + (++ticks); }, 100);</script></body></html>`);
    case '/stall-fill.html':
      // Once the solver watches it (its binding is there), the page's own script blocks its thread for 1 s,
      // longer than the quiet window; 100 ms after that it writes its text.
      return send(res, 200, 'text/html; charset=utf-8', `<!doctype html><html><head><title>Stall fill</title></head><body><main><h1>Stall fill</h1><div id="root"></div></main>
<script>const watched = setInterval(() => {
  if (typeof window.__solverPageChanged !== 'function') return;
  clearInterval(watched);
  setTimeout(() => {
    const until = Date.now() + 1000;
    while (Date.now() < until);
    setTimeout(() => { document.getElementById('root').textContent = 'Written after ' + 'the stall'; }, 100);
  }, 100);
}, 10);</script></body></html>`);
    case '/long-poll.html':
      // Never settles: a request that the server never answers stays in flight.
      return send(res, 200, 'text/html; charset=utf-8', `<!doctype html><html><head><title>Long poll</title></head><body><h1>Long poll</h1><p>Waiting for news.</p>
<script>addEventListener('load', () => fetch('/hang').catch(() => undefined));</script></body></html>`);
    default: {
      const file = path.join(FIXTURES, path.normalize(url.pathname).replace(/^(\.\.[/\\])+/, ''));
      if (url.pathname.endsWith('.html') && fs.existsSync(file)) return send(res, 200, 'text/html; charset=utf-8', fs.readFileSync(file));
      if (url.pathname.startsWith('/images/')) return send(res, 200, 'image/png', Buffer.alloc(0));
      return send(res, 404, 'text/plain', 'not found');
    }
  }
}

export async function startFixtureServer(host = '127.0.0.1'): Promise<FixtureServer> {
  const requests: string[] = [];
  const server = http.createServer((req, res) => {
    requests.push(req.url ?? '');
    route(req, res);
  });
  const sockets = new Set<import('node:net').Socket>();
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://${host}:${port}`,
    port,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
