import net from 'node:net';

/** True when nothing listens on host:port and we may bind it. */
export function isPortFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, host, () => server.close(() => resolve(true)));
  });
}

/** The preferred port when it is free, otherwise one the kernel picks, so two stacks never collide. */
export async function pickPort(preferred?: number, host = '127.0.0.1'): Promise<number> {
  if (preferred && (await isPortFree(preferred, host))) return preferred;
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
