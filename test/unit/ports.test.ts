import fs from 'node:fs';
import net from 'node:net';
import { isPortFree, pickPort } from '../../src/embedded/ports';

const ephemeralStart = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);

test('a picked port lies below the ephemeral range, where no outgoing connection takes it', async () => {
  const ports = await Promise.all(Array.from({ length: 20 }, () => pickPort()));
  for (const port of ports) {
    expect(port).toBeGreaterThanOrEqual(20_000);
    expect(port).toBeLessThan(ephemeralStart);
  }
  // Drawn at random, so stacks starting together do not all pick one port.
  expect(new Set(ports).size).toBeGreaterThan(10);
});

test('the preferred port when free, another when something listens on it', async () => {
  const preferred = await pickPort();
  expect(await pickPort(preferred)).toBe(preferred);
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(preferred, '127.0.0.1', resolve));
  try {
    expect(await isPortFree(preferred)).toBe(false);
    const other = await pickPort(preferred);
    expect(other).not.toBe(preferred);
    expect(await isPortFree(other)).toBe(true);
  } finally {
    await new Promise((resolve) => holder.close(resolve));
  }
});
