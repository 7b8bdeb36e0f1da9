import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** A stand-in for an OpenAI-compatible model server that streams canned chunks. */
export type FakeUpstream = { baseUrl: string; requests: Array<{ headers: http.IncomingHttpHeaders; body: Record<string, unknown> }>; close(): Promise<void> };

export type UpstreamScript = (body: Record<string, unknown>, res: http.ServerResponse) => void;

export async function startFakeUpstream(script: UpstreamScript): Promise<FakeUpstream> {
  const requests: FakeUpstream['requests'] = [];
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk) => (raw += chunk));
    req.on('end', () => {
      const body = JSON.parse(raw || '{}') as Record<string, unknown>;
      requests.push({ headers: req.headers, body });
      if (req.url !== '/v1/chat/completions') {
        res.writeHead(404).end();
        return;
      }
      script(body, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    requests,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

export function streamChunks(res: http.ServerResponse, chunks: unknown[], options: { done?: boolean; splitWrites?: boolean } = {}): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const text = chunks.map((chunk) => `data: ${JSON.stringify(chunk)}\r\n\r\n`).join('') + (options.done === false ? '' : 'data: [DONE]\n\n');
  if (!options.splitWrites) {
    res.end(text);
    return;
  }
  // Byte-sized writes make sure event boundaries split across network chunks are handled.
  let offset = 0;
  const step = () => {
    if (offset >= text.length) return res.end();
    res.write(text.slice(offset, offset + 7));
    offset += 7;
    setImmediate(step);
  };
  step();
}
