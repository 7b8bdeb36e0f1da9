import net from 'node:net';

export interface HoldingProxy {
  /** host:port to connect to instead of the target. */
  address: string;
  /** Stops passing on what clients send (kept, in order); replies still flow. */
  hold(): void;
  /** Passes on what clients sent meanwhile, and everything after. */
  release(): void;
  /** Drops every connection (with what it held) and sends new ones to `target` instead. */
  redirect(target: string): void;
  close(): Promise<void>;
}

/** A TCP proxy to `target` (host:port) that can hold requests on their way, e.g. to make a server seem slow. */
export async function startHoldingProxy(target: string): Promise<HoldingProxy> {
  const hostPort = (address: string) => [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))] as const;
  let [host, port] = hostPort(target);
  // Per client connection: its upstream socket and what it sent while held, in order.
  const clients = new Map<net.Socket, { upstream: net.Socket; waiting: Buffer[] }>();
  let held = false;
  const server = net.createServer((client) => {
    const upstream = net.connect(port, host);
    const state = { upstream, waiting: [] as Buffer[] };
    clients.set(client, state);
    client.on('data', (chunk) => (held ? state.waiting.push(chunk) : upstream.write(chunk)));
    upstream.pipe(client);
    const end = () => {
      clients.delete(client);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    hold: () => {
      held = true;
    },
    release: () => {
      held = false;
      for (const { upstream, waiting } of clients.values()) for (const chunk of waiting.splice(0)) upstream.write(chunk);
    },
    redirect: (next) => {
      [host, port] = hostPort(next);
      held = false;
      for (const client of clients.keys()) client.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const client of clients.keys()) client.destroy();
        server.close(() => resolve());
      }),
  };
}
