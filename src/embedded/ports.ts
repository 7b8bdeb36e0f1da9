import fs from 'node:fs';
import net from 'node:net';

/**
 * Listening ports are drawn from below the kernel's ephemeral range. A port the kernel hands out for
 * `listen(0)` comes from that range, which outgoing connections draw their local ports from too: in the
 * seconds between picking such a port and a server binding it, any connection on the machine may take
 * it, and the server fails with EADDRINUSE. Below the range, only another listener can collide, and
 * the pick checks for that.
 */
const LISTEN_RANGE_START = 20_000;
/** The Linux default start of the ephemeral range, where /proc does not say. */
const EPHEMERAL_START_DEFAULT = 32_768;
/** Random draws before falling back to a port the kernel picks. */
const PICK_ATTEMPTS = 50;
/** Below this many ports under the range (a machine whose range starts low), the kernel picks instead. */
const LEAST_LISTEN_RANGE = 1_000;

function ephemeralStart(): number {
  try {
    const [low] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/);
    const start = Number(low);
    return Number.isInteger(start) && start > 0 ? start : EPHEMERAL_START_DEFAULT;
  } catch {
    return EPHEMERAL_START_DEFAULT;
  }
}

/** True when nothing listens on host:port and we may bind it. */
export function isPortFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, host, () => server.close(() => resolve(true)));
  });
}

function kernelPort(host: string): Promise<number> {
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

/**
 * The preferred port when it is free, otherwise a free one below the ephemeral range, drawn at random
 * so that two stacks starting together do not pick the same one.
 */
export async function pickPort(preferred?: number, host = '127.0.0.1'): Promise<number> {
  if (preferred && (await isPortFree(preferred, host))) return preferred;
  const end = ephemeralStart();
  if (end - LISTEN_RANGE_START >= LEAST_LISTEN_RANGE) {
    for (let attempt = 0; attempt < PICK_ATTEMPTS; attempt++) {
      const port = LISTEN_RANGE_START + Math.floor(Math.random() * (end - LISTEN_RANGE_START));
      if (await isPortFree(port, host)) return port;
    }
  }
  return kernelPort(host);
}
