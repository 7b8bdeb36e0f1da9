import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import WebSocket from 'ws';
import { sleep } from './stats';

/** Simulated participants for the benchmark: HTTP helpers, instant WebSocket solvers, a fake OpenAI upstream. */

export async function call(base: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const { status, text } = await send(`${base}${path}`, method, body === undefined ? undefined : JSON.stringify(body), headers);
  if (status >= 400) throw new Error(`${method} ${path} → ${status} ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : undefined;
}

// One pool of kept-alive connections for every request the benchmark makes. node:http rather than fetch:
// the clients, solvers and upstream share the 2 cores with the service, and fetch's web streams cost
// several times the CPU per request and per streamed event.
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });

/** One request whatever its status (`call` throws on 4xx and 5xx). */
export async function request(base: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  return send(`${base}${path}`, method, body === undefined ? undefined : JSON.stringify(body), headers);
}

function send(url: string, method: string, body: string | undefined, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method, agent, headers: body === undefined ? headers : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers } }, (response) => {
      response.setEncoding('utf8');
      let text = '';
      response.on('data', (part: string) => (text += part));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, text }));
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end(body);
  });
}

export async function register(base: string) {
  const account = (await call(base, 'POST', '/v1/register')) as { account_id: string; api_key: string };
  return { ...account, auth: { Authorization: `Bearer ${account.api_key}` } };
}

import type { TaskMessage as TaskFrame } from '../../src/schemas/frames';

export type { TaskFrame };

export class SimSolver {
  socket!: WebSocket;
  constructor(
    readonly apiKey: string,
    readonly solverId: string,
  ) {}

  static async connect(base: string, account: { api_key: string; account_id: string }, onTask?: (frame: TaskFrame, solver: SimSolver) => void) {
    const solver = new SimSolver(account.api_key, account.account_id);
    solver.socket = new WebSocket(`${base.replace(/^http/, 'ws')}/v1/solver/connect`, { headers: { Authorization: `Bearer ${account.api_key}` }, perMessageDeflate: false });
    await new Promise<void>((resolve, reject) => {
      solver.socket.once('error', reject);
      solver.socket.on('message', (data) => {
        const frame = JSON.parse(data.toString());
        if (frame.type === 'welcome') resolve();
        else if (frame.type === 'task') onTask?.(frame, solver);
      });
    });
    return solver;
  }

  send(frame: object) {
    this.socket.send(JSON.stringify(frame));
  }

  close() {
    this.socket.terminate();
  }
}

export const FETCH_RESULT = (url: string) => ({ url, final_url: url, status_code: 200, content_type: 'markdown', content: '# Benchmark page\n\nHello.', title: 'Benchmark page' });

/** How the fake upstream streams: all at once (0 ms) or like a model, a first token after a delay and then one chunk every interval. */
export interface Pacing {
  chunks: number;
  firstTokenMs: number;
  chunkIntervalMs: number;
}

/** A fake OpenAI-compatible upstream; `setPacing` switches how it streams between benchmark phases. */
export async function startFakeUpstream(initial: Pacing) {
  let pacing = initial;
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (part) => (body += part));
    req.on('end', async () => {
      const { chunks, firstTokenMs, chunkIntervalMs } = pacing;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const base = { id: 'up-1', object: 'chat.completion.chunk', created: 0, model: 'gpt-4o' };
      if (firstTokenMs > 0) await sleep(firstTokenMs);
      for (let i = 0; i < chunks; i++) {
        if (i > 0 && chunkIntervalMs > 0) await sleep(chunkIntervalMs);
        res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { content: `t${i} ` }, finish_reason: null }] })}\n\n`);
      }
      res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
      res.write(`data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 10, completion_tokens: chunks, total_tokens: 10 + chunks } })}\n\n`);
      res.end('data: [DONE]\n\n');
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    setPacing: (next: Pacing) => {
      pacing = next;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * POSTs a JSON body and reads the SSE answer, calling `onData` with each `data:` payload and its arrival
 * time; rejects on a status other than 200 (with its body), a cut stream, or an error thrown by `onData`.
 */
export function postSse(
  url: string,
  body: unknown,
  headers: Record<string, string>,
  onData: (data: string, at: number) => void,
  onHeaders?: (headers: http.IncomingHttpHeaders) => void,
): Promise<void> {
  const text = JSON.stringify(body);
  return new Promise<void>((resolve, reject) => {
    const request = http.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers } }, (response) => {
      response.setEncoding('utf8');
      let buffer = '';
      if (response.statusCode !== 200) {
        response.on('data', (part: string) => (buffer += part));
        response.on('end', () => reject(new Error(`${response.statusCode} ${buffer.slice(0, 300)}`)));
        return;
      }
      onHeaders?.(response.headers);
      response.on('data', (part: string) => {
        const at = performance.now();
        buffer += part;
        try {
          let boundary: number;
          while ((boundary = buffer.indexOf('\n\n')) >= 0) {
            const event = buffer.slice(0, boundary);
            buffer = buffer.slice(boundary + 2);
            for (const line of event.split('\n')) if (line.startsWith('data: ')) onData(line.slice(6), at);
          }
        } catch (error) {
          response.destroy();
          reject(error);
        }
      });
      response.on('end', () => resolve());
      response.on('close', () => {
        if (!response.complete) reject(new Error('the stream was cut'));
      });
    });
    request.on('error', reject);
    request.end(text);
  });
}

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

const pngChunk = (type: string, data: Buffer) => {
  const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const framed = Buffer.alloc(body.length + 8);
  framed.writeUInt32BE(data.length, 0);
  body.copy(framed, 4);
  framed.writeUInt32BE(zlib.crc32(body), body.length + 4);
  return framed;
};

/**
 * A valid PNG of about `bytes` bytes that does not compress (RGB noise, its IDAT deflated), as a rendered
 * page's screenshot does not: the artifact store and PostgreSQL see a real screenshot's size and entropy
 * without a browser.
 */
export function noisePng(bytes: number): Buffer {
  const width = 256;
  const row = 1 + width * 3;
  // Signature, IHDR, IDAT's framing and zlib's, IEND: about 70 bytes besides the pixels.
  const height = Math.max(1, Math.round((bytes - 70) / row));
  const pixels = crypto.randomBytes(height * row);
  for (let y = 0; y < height; y++) pixels[y * row] = 0; // each scanline's filter: none
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8); // 8-bit RGB, deflate, no filter method extension, not interlaced
  return Buffer.concat([PNG_SIGNATURE, pngChunk('IHDR', header), pngChunk('IDAT', zlib.deflateSync(pixels)), pngChunk('IEND', Buffer.alloc(0))]);
}

// The signature and the IHDR chunk, which a PNG starts with and its other chunks follow.
const PNG_HEAD_BYTES = 8 + 12 + 13;

/**
 * The PNG with a `tEXt` chunk naming `n` after its header, for each `n`: the same image with its own
 * bytes and hash for every task (a store that deduplicated would otherwise keep one copy), for a copy.
 */
export function markedPng(png: Buffer): (n: number) => Buffer {
  if (!png.subarray(0, 8).equals(PNG_SIGNATURE) || png.toString('latin1', 12, 16) !== 'IHDR') throw new Error('not a PNG');
  const head = png.subarray(0, PNG_HEAD_BYTES);
  const rest = png.subarray(PNG_HEAD_BYTES);
  return (n) => Buffer.concat([head, pngChunk('tEXt', Buffer.from(`bench-task\0${n}`, 'latin1')), rest]);
}

// How long a connection may take to be welcomed before it is tried again.
const RECONNECT_WELCOME_MS = 15_000;

/**
 * A SimSolver that connects again whenever its socket closes (a server that timed it out on a machine
 * busy with other work), until `close`; `reconnects` counts how often it had to.
 */
export async function keptSolver(base: string, account: { api_key: string; account_id: string }, onTask: (frame: TaskFrame, solver: SimSolver) => void) {
  let stopped = false;
  let reconnects = 0;
  const connect = (): Promise<SimSolver> =>
    Promise.race([
      SimSolver.connect(base, account, onTask),
      sleep(RECONNECT_WELCOME_MS).then(() => {
        throw new Error('not welcomed in time');
      }),
    ]);
  const watch = (solver: SimSolver) => {
    solver.socket.once('close', async () => {
      while (!stopped) {
        try {
          current = await connect();
          reconnects += 1;
          if (stopped) current.close();
          else watch(current);
          return;
        } catch {
          await sleep(500);
        }
      }
    });
  };
  let current = await SimSolver.connect(base, account, onTask);
  watch(current);
  return {
    reconnects: () => reconnects,
    close: () => {
      stopped = true;
      current.close();
    },
  };
}
