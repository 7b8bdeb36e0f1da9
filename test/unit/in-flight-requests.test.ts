import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { InFlightRequests } from '../../src/http/in-flight-requests';

describe('requests in flight on a node that is stopping', () => {
  let server: http.Server;
  let requests: InFlightRequests;
  let url: string;
  let hold: Promise<void> = Promise.resolve();
  // Told when the server has taken a request (and, for /stream, sent its headers).
  let taken: () => void = () => undefined;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

  beforeEach(async () => {
    hold = Promise.resolve();
    // Answers at once unless told to wait, as /health does.
    server = http.createServer((req, res) => {
      if (req.url === '/slow') {
        void hold.then(() => res.end('slow'));
        taken();
      } else if (req.url === '/stream') {
        // Headers out at once, the body later: as an SSE stream.
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('first ');
        void hold.then(() => res.end('last'));
        taken();
      } else res.end('ok');
    });
    requests = new InFlightRequests(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterEach(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  afterAll(() => agent.destroy());

  // The response, and the connection it came on (the agent takes it back once the body has ended).
  const get = (path: string) =>
    new Promise<http.IncomingMessage & { socketUsed: import('node:net').Socket }>((resolve, reject) => {
      http.get(`${url}${path}`, { agent }, (res) => {
        const socketUsed = res.socket;
        res.resume();
        res.on('end', () => resolve(Object.assign(res, { socketUsed })));
      }).on('error', reject);
    });

  test('once draining, every response asks the client to close its connection, even one the app sends at once', async () => {
    expect((await get('/')).headers.connection).toBe('keep-alive');
    const drained = requests.drained(5000);
    // A keep-alive client (a load balancer, say) would otherwise go on sending requests to a node going away.
    expect((await get('/')).headers.connection).toBe('close');
    await expect(drained).resolves.toBe(0);
  });

  // A request the server holds until `release`, already under way when the test goes on.
  const inFlight = async (path: string) => {
    let release!: () => void;
    hold = new Promise((resolve) => (release = resolve));
    const arrived = new Promise<void>((resolve) => (taken = resolve));
    const response = get(path);
    await arrived;
    return { response, release };
  };

  test('draining waits for the requests in flight, and only up to the grace', async () => {
    const { response: slow, release } = await inFlight('/slow');
    await expect(requests.drained(100)).resolves.toBe(1);
    const drained = requests.drained(5000);
    release();
    const answered = await slow;
    expect(answered.statusCode).toBe(200);
    // Answered after the drain began: its client is told to close the connection too.
    expect(answered.headers.connection).toBe('close');
    await expect(drained).resolves.toBe(0);
  });

  test('a response whose headers went out before the drain began has its connection closed when it ends', async () => {
    const { response: streaming, release } = await inFlight('/stream');
    const drained = requests.drained(5000);
    release();
    const answered = await streaming;
    expect(answered.headers.connection).toBe('keep-alive');
    await expect(drained).resolves.toBe(0);
    // Closed by the server (with keep-alive, the agent would hold it open for the next request).
    await new Promise<void>((resolve) => (answered.socketUsed.destroyed ? resolve() : answered.socketUsed.once('close', () => resolve())));
    expect(answered.socketUsed.destroyed).toBe(true);
  });
});
